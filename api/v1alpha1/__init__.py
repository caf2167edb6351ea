"""carve's API types, version v1alpha1: opaque claim configs (config.py, resolve.py; schema.py exports
the JSON Schemas) and the strategy controller's NodePartitioning and PartitioningPolicy (partitioning.py,
imported from there: `from api.v1alpha1.partitioning import parse_node_partitioning`)."""

from api.v1alpha1.config import (
    KIND_GPU_CONFIG,
    KIND_SLICE_CONFIG,
    Config,
    ConfigError,
    GpuConfig,
    Sharing,
    SliceConfig,
    TimeSlicingSettings,
    json_schemas,
    parse_config,
)
from api.v1alpha1.resolve import (
    KIND_FOR_TYPE,
    default_config,
    request_matches,
    resolve_configs,
    split_allocation_config,
)

__all__ = [
    "KIND_FOR_TYPE",
    "KIND_GPU_CONFIG",
    "KIND_SLICE_CONFIG",
    "Config",
    "ConfigError",
    "GpuConfig",
    "Sharing",
    "SliceConfig",
    "TimeSlicingSettings",
    "default_config",
    "json_schemas",
    "parse_config",
    "request_matches",
    "resolve_configs",
    "split_allocation_config",
]
