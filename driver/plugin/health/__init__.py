"""The plugin's health: the HTTP probe endpoint for the DaemonSet."""
