"""Error messages in plain words for the page and the API.

The framework's messages are written for a terminal: they may carry a Python exception class
(``UnidentifiedImageError: cannot identify image file <_io.BytesIO object at 0x7f...>``) or
advice for the command line ("rerun the same command to retry the failed ones"). A person
using the page can act on neither. :func:`plain` keeps what the message says about the input
and drops the rest; :func:`unreadable_image` words a file that does not decode.
"""

from __future__ import annotations

import re

#: formats an upload may have, as people name them
ACCEPTED = "JPEG, PNG, WebP, GIF, BMP, TIFF, HEIC or AVIF"

# "stage 'create': 1 of 1 queries failed (first: query query: ValueError: ...); the others' work is saved, rerun ..."
_STAGE = re.compile(
    r"^stage '(?P<stage>[^']+)': \d+ of \d+ quer(?:y|ies) failed \(first: query [^:]+: (?P<why>.*)\)"
    r"(?:; the others' work is saved, rerun the same command to retry the failed ones)?$",
    re.S,
)
# an exception class name in front of its message: "UnidentifiedImageError: ", "PIL.Image.DecompressionBombError: "
_CLASS = re.compile(r"\b(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Failure|Interrupt)\b(?::\s*|\s+)")
# an object's repr: "<_io.BytesIO object at 0x7f...>"
_REPR = re.compile(r"\s*<[\w.]+ object at 0x[0-9a-fA-F]+>")
# command-line advice
_RERUN = re.compile(
    r"[;,]?\s*(?:the others' work is saved,\s*)?(?:re-?run|run again) (?:the (?:same )?command|it)[^.;)]*", re.I
)


def plain(message: str) -> str:
    """``message`` without exception class names, object reprs or command-line advice."""
    msg = str(message).strip()
    m = _STAGE.match(msg)
    if m:
        msg = f"the search stopped at its '{m['stage']}' step: {plain(m['why'])}"
    msg = _REPR.sub("", msg)
    msg = _CLASS.sub("", msg)
    msg = _RERUN.sub("", msg)
    msg = msg.replace("cannot identify image file", "not in an image format agentcir knows")
    msg = re.sub(r"\(\s*\)", "", msg)
    msg = re.sub(r"\s{2,}", " ", msg).strip(" ;,")
    return msg or "the request could not be completed"


def unreadable_image(name: str, err: BaseException) -> str:
    """The sentence for a file that does not decode as an image (an upload, a gallery file)."""
    text = str(err)
    low = text.lower()
    if "cannot identify image file" in low or type(err).__name__ == "UnidentifiedImageError":
        why = f"it is not in an image format agentcir knows: {ACCEPTED}"
    elif "truncated" in low or "broken data stream" in low or "premature end" in low:
        why = "the file is damaged or cut short"
    elif isinstance(err, FileNotFoundError):
        why = "the file is gone"
    else:
        why = plain(text)
    return f"This file is not an image agentcir can read ('{name}': {why})"
