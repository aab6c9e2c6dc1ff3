"""The mock's fixed vocabulary: a few hundred ordinary pieces; a piece's index is its token id."""

from __future__ import annotations

BANG_ID = 0
"""Token id 0 is `!`, as in the Qwen family: a run of it is the classic collapse."""
EMPTY_ID = 1
"""A special token that decodes to the empty string (what an `empty` collapse emits)."""

_PUNCT = ["!", "", ".", ",", ":", ";", "?", "\n", "\n\n", "()", " =", " ->", "'s"]
_STARTERS = [" The", " It", " This", " We", " In", " A", " When", " If", " Each", " You"]
_WORDS = """
the of and to in is that for it as with was on be by this are from or at an which not
have has but can all one will more other were their there been when would if each into
only some may also time any these two first then such new over most used use like make
could them see way many after where very because does how well just should value result
data file line list table code function method class module object string number error
test server request response token model output input system process thread memory
device buffer kernel graph batch queue cache state config option version package library
source build install path user name type field record event handler client default
return import self none true false print open read write close start stop run call check
load save parse format update delete create find sort filter map reduce apply small
large simple fast slow early late local remote public private common different same next
last long short high low good better best clear full empty main single double example
section chapter page document note manual guide reference index entry key word text
character byte block stream window frame point level layer step stage phase part order
group set range size count total average rate limit scale factor weight bias python
shell debian system service network socket port host address message header body
""".split()  # noqa: SIM905 (a word list reads better as text)
_CODE = [" def", " return", " import", " class", " self", " None", " True", " False", " if"]

VOCAB: tuple[str, ...] = tuple(
    dict.fromkeys(_PUNCT + _STARTERS + [" " + w for w in _WORDS] + _CODE)
)
"""The fixed vocabulary; the index of a piece is its token id."""
VOCAB_SIZE = len(VOCAB)
WORD_IDS: tuple[int, ...] = tuple(
    i
    for i, piece in enumerate(VOCAB)
    if piece.startswith(" ") and piece[1:].isalpha() and piece[1:].islower()
)
"""Ids of plain word pieces: what perturbations and word loops draw from."""
PIECE_ID: dict[str, int] = {piece: i for i, piece in enumerate(VOCAB)}
"""Piece -> token id."""
STARTER_IDS: tuple[int, ...] = tuple(PIECE_ID[piece] for piece in _STARTERS)
"""Ids of the capitalised sentence starters."""
