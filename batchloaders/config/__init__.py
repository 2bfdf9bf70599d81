"""Reading, validating and typing manifests and loader configs (no TensorFlow here)."""
