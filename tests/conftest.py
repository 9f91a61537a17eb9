"""tests/: make the shared helper modules (campaign_helpers, scripted_worker) importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
