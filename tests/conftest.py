"""Shared test set-up: the collection resolves through .collections, as in ansible.cfg."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / ".collections"))
