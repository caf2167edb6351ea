"""carve's API types, version v1alpha1: opaque claim configs (config.py), which one applies (resolve.py),
what a claim may change of its class's (policy.py); schema.py exports the JSON Schemas."""

from api.v1alpha1.config import (
    KIND_GPU_CONFIG,
    KIND_SLICE_CONFIG,
    Config,
    ConfigError,
    GpuClaimPolicy,
    GpuConfig,
    Sharing,
    SliceClaimPolicy,
    SliceConfig,
    TimeSlicingSettings,
    json_schemas,
    parse_config,
)
from api.v1alpha1.policy import allowed_values, bound
from api.v1alpha1.resolve import (
    KIND_FOR_TYPE,
    claim_config_indices,
    default_config,
    request_class,
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
    "GpuClaimPolicy",
    "GpuConfig",
    "Sharing",
    "SliceClaimPolicy",
    "SliceConfig",
    "TimeSlicingSettings",
    "allowed_values",
    "bound",
    "claim_config_indices",
    "default_config",
    "json_schemas",
    "parse_config",
    "request_class",
    "request_matches",
    "resolve_configs",
    "split_allocation_config",
]
