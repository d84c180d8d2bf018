"""Run one documentation page's script as ``python SCRIPT`` would, and record what it printed.

``python docs_driver.py SCRIPT RESULT`` (run by ``tests/test_docs.py`` with the interpreter of a
virtual environment holding only the installed wheel and the page's extras; the standard library
alone is imported here). SCRIPT is the page's ```python blocks in one file, each block at its
own line numbers of the Markdown page, as a user pastes them into a file in an empty directory.

It runs as ``__main__`` with the script's directory first on ``sys.path`` and the driver's own
directory off it, as ``python SCRIPT`` would (a ``multiprocessing`` child started with ``spawn``
imports the script itself). ``print`` calls made by the script's own lines are recorded with
their line numbers, and printed as usual. RESULT receives JSON: ``printed`` (``[line, text]``
pairs, in order) and ``error`` (the traceback from the script's first frame on, or ``null``).
The exit status is 1 when the script raised, else 0.
"""

from __future__ import annotations

import builtins
import json
import runpy
import sys
import threading
import traceback
from pathlib import Path
from typing import Any


def main() -> int:
    script, result = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    filename = str(script)
    printed: list[tuple[int, str]] = []
    lock = threading.Lock()
    real_print = builtins.print

    def recording_print(*args: Any, **kwargs: Any) -> None:
        real_print(*args, **kwargs)
        if kwargs.get("file") is not None:  # printed somewhere else: not the shown output
            return
        caller = sys._getframe(1)
        if caller.f_code.co_filename == filename:
            sep, end = kwargs.get("sep", " "), kwargs.get("end", "\n")
            text = (" " if sep is None else sep).join(map(str, args))
            text += "\n" if end is None else end
            with lock:
                printed.append((caller.f_lineno, text.removesuffix("\n")))

    builtins.print = recording_print
    sys.argv = [filename]
    sys.path[0] = str(script.parent)
    error = None
    try:
        runpy.run_path(filename, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            error = traceback.format_exc()
    except BaseException as raised:  # a page's code may raise anything
        tb = raised.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != filename:
            tb = tb.tb_next  # the driver's and runpy's frames say nothing about the page
        error = "".join(traceback.format_exception(type(raised), raised, tb))
    finally:
        builtins.print = real_print
        sys.stdout.flush()
    result.write_text(json.dumps({"printed": printed, "error": error}), encoding="utf-8")
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main())
