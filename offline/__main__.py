import os
import sys

from .cli import main

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:  # the reader left (`python -m offline preview | head`); files are written
    code = 1
# Skipping the interpreter's teardown saves freeing a heap of tens of thousands of objects one by
# one (about a second on a 1024-node stack); everything is written and closed by now.
os._exit(code)
