"""The plugin's durable node state: the checkpoint, the locks that guard it, recovery at start."""
