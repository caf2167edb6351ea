"""The enforcement watch: the claims' regions, the NVML cross-check, and what follows a finding."""
