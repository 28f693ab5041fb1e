"""Entry point: ``python -m salesforce_emulator serve | generate`` (see salesforce_emulator.cli)."""

import sys

from salesforce_emulator.cli import main

sys.exit(main())
