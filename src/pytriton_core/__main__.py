import sys

from pytriton_core.cli import main

sys.exit(main())
