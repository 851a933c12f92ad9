#!/usr/bin/env python3
"""Validator for bench/blind_conversations_2/*.jsonl.

Checks, per file:
  * each line is a JSON object with speaker/text/facts/superseded/corrects
  * speaker is user, assistant or system; text is non-empty
  * every fact (1-6 words) and its anchor occur verbatim in the text
  * every superseded value occurs verbatim in its text
  * every correction's new value and anchor occur verbatim in its text,
    and new is listed among that utterance's facts
  * every corrects.old was marked superseded by an earlier utterance, and
    every superseded value is corrected by a later utterance
  * no superseded value equals, contains, or is contained in any kept fact
  * at least 580 utterances; 30-40 % of utterances carry facts;
    at least one correction per 30 utterances
  * no sentence frame (runs of digits -> 0, capitalised words -> W)
    occurs more than 3 times in the file
  * multi-party file: every user line starts with a "Name: " prefix
Exit status 0 if every check passes.
"""

import json
import pathlib
import re
import sys
from collections import Counter, defaultdict

HERE = pathlib.Path(__file__).resolve().parent
FILES = {"vet_practice.jsonl": False, "renovation_channel.jsonl": True}
MIN_UTTS = 580
SPEAKERS = {"user", "assistant", "system"}
KEYS = {"speaker", "text", "facts", "superseded", "corrects"}

NAME_PREFIX = re.compile(
    r"^(?:(?:Dr|Mr|Ms|Mrs|Mx)\. )?[A-Z][A-Za-z'\u2019-]+(?: [A-Z][A-Za-z'\u2019-]+){0,3}: (?=\S)"
)
ABBR = re.compile(r"\b(Dr|Mr|Ms|Mrs|Mx|St|No|vs|Jr|Sr|approx|Ave|Rd)\.")
EG = re.compile(r"\b(e)\.(g)\.|\b(i)\.(e)\.")


def sentences(text):
    t = ABBR.sub(lambda m: m.group(1) + "\u2024", text)
    t = t.replace("e.g.", "e\u2024g\u2024").replace("i.e.", "i\u2024e\u2024")
    parts = re.split(r"(?<=[.!?])\s+", t)
    return [p.strip() for p in parts if p.strip()]


def frame(sentence):
    s = re.sub(r"\d+", "0", sentence)
    s = re.sub(r"\b[A-Z][\w'\u2019\u2024-]*", "W", s)
    return re.sub(r"\s+", " ", s).strip()


def check(path, multi):
    errs = []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            r = json.loads(line)
        except ValueError as e:
            errs.append(f"line {n}: bad JSON ({e})")
            continue
        if not isinstance(r, dict) or set(r) != KEYS:
            errs.append(f"line {n}: keys must be exactly {sorted(KEYS)}")
            continue
        rows.append((n, r))

    all_facts = []
    sup_at = defaultdict(list)  # value -> [line numbers]
    corr_at = defaultdict(list)  # old -> [line numbers]
    with_facts = 0
    n_corr = 0
    n_facts = 0
    frames = Counter()
    frame_example = {}
    frame_all = defaultdict(list)

    for n, r in rows:
        sp, text = r["speaker"], r["text"]
        if sp not in SPEAKERS:
            errs.append(f"line {n}: bad speaker {sp!r}")
        if not isinstance(text, str) or not text.strip():
            errs.append(f"line {n}: empty text")
            continue
        body = text
        if multi and sp == "user":
            m = NAME_PREFIX.match(text)
            if not m:
                errs.append(f"line {n}: user line lacks 'Name: ' prefix")
            else:
                body = text[m.end() :]
        for s in sentences(body):
            f = frame(s)
            frames[f] += 1
            frame_example.setdefault(f, (n, s))
            frame_all[f].append(n)
        if r["facts"]:
            with_facts += 1
        for fa in r["facts"]:
            n_facts += 1
            fact, anchor = fa.get("fact", ""), fa.get("anchor", "")
            if not fact or fact not in text:
                errs.append(f"line {n}: fact not verbatim: {fact!r}")
            if not anchor or anchor not in text:
                errs.append(f"line {n}: anchor not verbatim: {anchor!r}")
            if not 1 <= len(fact.split()) <= 6:
                errs.append(f"line {n}: fact must be 1-6 words: {fact!r}")
            all_facts.append((n, fact))
        for v in r["superseded"]:
            if not v or v not in text:
                errs.append(f"line {n}: superseded not verbatim: {v!r}")
            sup_at[v].append(n)
        for c in r["corrects"]:
            n_corr += 1
            old, new, anchor = c.get("old", ""), c.get("new", ""), c.get("anchor", "")
            if not new or new not in text:
                errs.append(f"line {n}: correction new not verbatim: {new!r}")
            if not anchor or anchor not in text:
                errs.append(f"line {n}: correction anchor not verbatim: {anchor!r}")
            if new not in [fa.get("fact") for fa in r["facts"]]:
                errs.append(f"line {n}: correction new not listed in facts: {new!r}")
            if not any(m < n for m in sup_at.get(old, [])):
                errs.append(f"line {n}: corrects.old not superseded earlier: {old!r}")
            corr_at[old].append(n)

    for v, lines in sup_at.items():
        for m in lines:
            if not any(k > m for k in corr_at.get(v, [])):
                errs.append(f"line {m}: superseded value never corrected later: {v!r}")
    for v in sup_at:
        for m, fact in all_facts:
            if v == fact or v in fact or fact in v:
                errs.append(f"superseded {v!r} clashes with fact {fact!r} (line {m})")

    total = len(rows)
    if total < MIN_UTTS:
        errs.append(f"only {total} utterances (< {MIN_UTTS})")
    share = with_facts / total if total else 0
    if not 0.30 <= share <= 0.40:
        errs.append(f"{share:.1%} of utterances carry facts (want 30-40 %)")
    if n_corr * 30 < total:
        errs.append(f"{n_corr} corrections for {total} utterances (< 1 per 30)")
    for f, c in frames.items():
        if c > 3:
            ln, s = frame_example[f]
            errs.append(
                f"sentence frame used {c}x: {f!r} (first at line {ln}: {s!r}; lines {frame_all[f]})"
            )

    stats = dict(
        utterances=total,
        with_facts=with_facts,
        share=round(share, 3),
        facts=n_facts,
        corrections=n_corr,
        superseded=sum(map(len, sup_at.values())),
    )
    return errs, stats


def main():
    ok = True
    for name, multi in FILES.items():
        p = HERE / name
        if not p.exists():
            print(f"{name}: MISSING")
            ok = False
            continue
        errs, stats = check(p, multi)
        print(f"{name}: {stats}")
        for e in errs:
            print("  ERROR", e)
        if errs:
            ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
