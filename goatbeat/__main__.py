"""``python -m goatbeat``: the same command as ``goatbeat``."""

from goatbeat.cli import main

if __name__ == "__main__":
    main()
