"""carve limits: the soft-slice limits of a claim, as the limiter in native/ enforces them.

`env` maps a claim's limits to the CARVE_* environment contract; `region` mirrors the shared accounting
region (native/include/carve_region.h) that the plugin creates and the limiter maps.
"""

from driver.limits.env import ClaimLimits, DeviceLimit, LimitsError, limiter_env, parse_limiter_env
from driver.limits.region import Region, RegionError, create_region, scan_host_pids

__all__ = [
    "ClaimLimits",
    "DeviceLimit",
    "LimitsError",
    "Region",
    "RegionError",
    "create_region",
    "limiter_env",
    "parse_limiter_env",
    "scan_host_pids",
]
