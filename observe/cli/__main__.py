"""``python -m observe.cli``."""
from observe.cli import main

main()
