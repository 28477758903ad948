import sys

from tests.chaos.run import main

sys.exit(main())
