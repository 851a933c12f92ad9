#!/usr/bin/env python3
"""Join the hand-written episode sources in src/ into the two JSONL files.

Source format (one utterance per line, annotations on the lines below it):
    U: text            user utterance
    A: text            assistant utterance
    S: text            system utterance
    Name: text         (multi-party file) user utterance; the whole line,
                       including the "Name: " prefix, is the text
    + fact @ anchor    a fact to keep (both verbatim in the text)
    - value            a value stated here that a later utterance corrects
    ~ old => new @ anchor
                       this utterance corrects `old`; `new` is added to facts
Lines starting with '#' and blank lines are ignored.
The script only parses and concatenates; it does not generate any text.
"""

import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
SPEAKERS = {"U": "user", "A": "assistant", "S": "system"}
NAMED = re.compile(
    r"^(?:(?:Dr|Mr|Ms|Mrs|Mx)\. )?[A-Z][A-Za-z'\u2019-]+(?: [A-Z][A-Za-z'\u2019-]+){1,3}: \S"
)


def parse(path):
    out = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.rstrip()
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        where = f"{path.name}:{n}"
        if s[:2] in ("U:", "A:", "S:"):
            out.append(
                {
                    "speaker": SPEAKERS[s[0]],
                    "text": s[2:].strip(),
                    "facts": [],
                    "superseded": [],
                    "corrects": [],
                }
            )
            continue
        if NAMED.match(s):
            out.append(
                {"speaker": "user", "text": s, "facts": [], "superseded": [], "corrects": []}
            )
            continue
        if not out:
            sys.exit(f"{where}: annotation before any utterance")
        cur = out[-1]
        if s.startswith("+ "):
            if " @ " not in s:
                sys.exit(f"{where}: fact without anchor")
            fact, anchor = s[2:].rsplit(" @ ", 1)
            cur["facts"].append({"fact": fact.strip(), "anchor": anchor.strip()})
        elif s.startswith("- "):
            cur["superseded"].append(s[2:].strip())
        elif s.startswith("~ "):
            body = s[2:]
            if " => " not in body or " @ " not in body:
                sys.exit(f"{where}: bad correction line")
            old, rest = body.split(" => ", 1)
            new, anchor = rest.rsplit(" @ ", 1)
            c = {"old": old.strip(), "new": new.strip(), "anchor": anchor.strip()}
            cur["corrects"].append(c)
            if not any(f["fact"] == c["new"] for f in cur["facts"]):
                cur["facts"].append({"fact": c["new"], "anchor": c["anchor"]})
        else:
            sys.exit(f"{where}: cannot parse line: {s!r}")
    return out


def build(prefix, target):
    files = sorted((HERE / "src").glob(prefix + "_*.txt"))
    rows = []
    for f in files:
        rows.extend(parse(f))
    with open(HERE / target, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{target}: {len(rows)} utterances from {len(files)} source files")


if __name__ == "__main__":
    build("vet", "vet_practice.jsonl")
    build("reno", "renovation_channel.jsonl")
