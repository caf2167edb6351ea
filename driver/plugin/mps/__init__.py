"""MPS (Multi-Process Service): the plugin's control daemon per `mps` GPU (daemon.py)."""
