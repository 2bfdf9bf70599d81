"""What is done to examples once read: secondary features, processing steps, padding and batching
policies, and the registries and plugin loading that let users add their own."""
