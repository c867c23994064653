import sys

from acceltrain.cli import main

sys.exit(main())
