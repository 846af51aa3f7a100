"""The safe set of `units::shown_as_itself`, read from the Unicode
character database as the `regex` package (an independent implementation
of the UCD's properties) holds it: prints the ranges of code points shown
as themselves, one `START END` (hexadecimal, inclusive) a line, then the
package's version. Run by tests/plain/shown.rs with the test venv."""

import regex

safe = regex.compile(r"[\p{L}\p{M}\p{N}\p{P}\p{S} ]")
hidden = regex.compile(
    r"[\p{Default_Ignorable_Code_Point}\p{Bidi_Control}\p{gc=Cf}\u2800]"
)

start = None
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        ok = False
    else:
        c = chr(cp)
        ok = safe.match(c) is not None and hidden.match(c) is None
    if ok and start is None:
        start = cp
    elif not ok and start is not None:
        print(f"{start:x} {cp - 1:x}")
        start = None
if start is not None:
    print(f"{start:x} 10ffff")
print("regex", regex.__version__)
