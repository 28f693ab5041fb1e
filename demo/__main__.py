import sys

from demo.main import main

sys.exit(main())
