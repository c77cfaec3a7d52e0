"""``python -m ragline.cli``: the ``ragline`` command without the console script."""

from ragline.console import main

main()
