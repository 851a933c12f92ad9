import sys

from chd.cli.main import main

sys.exit(main())
