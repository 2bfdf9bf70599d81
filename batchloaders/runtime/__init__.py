"""What a running pipeline needs beside its stages: seeds and draws, resume, the StateSaver, the
tf.data service, Keras alignment and located data errors."""
