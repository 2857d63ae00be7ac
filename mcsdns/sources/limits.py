"""The sources' bounds that the command line shows, in a module of their own: building the
parser imports no YAML parser."""

MANIFEST_MAX_BYTES = 16 << 20  # default --max-manifest-bytes: larger manifest files are skipped
