"""`carve status`: who holds which GPU. One row per allocated device of carve's driver.

model.py joins ResourceSlices, ResourceClaims (status.reservedFor -> pods), NodePartitionings and the
plugins' metrics into rows (pure); sources.py reads them from the API server and the plugins' /metrics;
command.py prints them as a table or JSON.
"""
