import sys

from tiny_llm.cli import main

sys.exit(main())
