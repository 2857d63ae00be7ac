"""mcsdns: authoritative DNS for the Kubernetes Multi-Cluster Services zone clusterset.local."""

# The one place the version is written: pyproject.toml reads it (dynamic version), and so do
# `mcsdns --version`, mcsdns_build_info, scripts/release (the tag must match it) and the image's
# org.opencontainers.image.version label. CHANGELOG.md says what each version changed.
__version__ = "0.2.0"
