"""carve limits: the soft-slice limits of a claim, as the limiter in native/ enforces them.

`env` maps a claim's limits to the CARVE_* environment contract; `region` mirrors the shared accounting
region (native/include/carve_region.h) that the plugin creates and the limiter maps; `limitsfile` the
plugin-owned, read-only limits file the limiter enforces.
"""

from driver.limits.env import ClaimLimits, DeviceLimit, LimitsError, limiter_env, parse_limiter_env
from driver.limits.limitsfile import ClaimRuntime, LimitsView, limits_path_for, read_limits, write_limits
from driver.limits.region import Region, RegionError, create_region, open_untrusted, scan_host_pids

__all__ = [
    "ClaimLimits",
    "ClaimRuntime",
    "DeviceLimit",
    "LimitsError",
    "LimitsView",
    "Region",
    "RegionError",
    "create_region",
    "limiter_env",
    "limits_path_for",
    "open_untrusted",
    "parse_limiter_env",
    "read_limits",
    "scan_host_pids",
    "write_limits",
]
