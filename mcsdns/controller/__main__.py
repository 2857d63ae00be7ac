import sys

from .cli import _standalone

sys.exit(_standalone())
