"""``python -m cuetrain ARGS``: the same as the ``cuetrain`` console script."""

from cuetrain.cli import console_main

if __name__ == "__main__":
    console_main()
