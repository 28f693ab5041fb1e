import sys

from cdc_subscriber.cli import main

sys.exit(main())
