#!/usr/bin/env python3
"""Validator for the blind conversations written by blind writer D.

Usage:
    python3 check_conversations_cd.py [FILE.jsonl ...]

Without arguments it checks mortgage_advice.jsonl and lab_research.jsonl
next to this script.  Exit status 0 when every check passes, 1 otherwise.

Each line must be a JSON object:
    {"speaker": "user"|"assistant"|"system", "text": "...",
     "facts": [{"fact": "...", "anchor": "..."}],
     "superseded": ["..."],
     "corrects": [{"old": "...", "new": "...", "anchor": "..."}]}

Checks (per file):
  * valid JSON, exactly these keys, valid speaker, non-empty text;
  * every fact and its anchor are verbatim substrings of the text; a fact is
    1-6 words, an anchor 1-4 words, and the anchor is not the fact itself;
  * every superseded value is a verbatim substring of its text, is not also
    listed as a fact of the same utterance, and is corrected by a LATER
    utterance (some later corrects.old equals it);
  * no fact anywhere in the file contains a superseded value (so keeping
    every fact and dropping every outdated value never conflict);
  * every correction: old, new and anchor are verbatim substrings of the
    correcting text, new is also listed in that utterance's facts, and old
    was listed as superseded by an EARLIER utterance;
  * counts: at least --min-utterances utterances (default 560);
  * share of utterances with at least one fact in [--min-share, --max-share]
    (default 0.30-0.40);
  * number of corrections at least utterances / 30 (about one per episode
    of 10-30 utterances);
  * files whose name contains "lab_research": every user utterance starts
    with "Name: " (one or more capitalised words or titles, then ": ");
  * sentence frames: each sentence (split after . ! ? except after common
    abbreviations such as "Dr.", "No.", "e.g.", "vs.", "approx.") is masked
    (tokens containing a digit -> 0, tokens starting with a capital letter
    -> X, runs of the same mask collapsed, the rest lower-cased without edge
    punctuation); no frame of
    4 or more tokens may occur more than 3 times, neither within one file
    nor across all files checked together.  The same check is applied to
    whole utterances.  Frames shorter than 4 tokens (bare acknowledgements
    such as "Thanks!" or "Yep.") are exempt but their top counts are shown.
"""
import argparse
import collections
import json
import os
import re
import sys

SPEAKERS = {"user", "assistant", "system"}
KEYS = {"speaker", "text", "facts", "superseded", "corrects"}
NAME_PREFIX = re.compile(r"^(?:[A-Z][\w'.\-]*\.? )*[A-Z][\w'.\-]*: \S")
SENT_SPLIT = re.compile(r"(?<=[.!?])\s+")
# abbreviations after which a full stop does not end a sentence
ABBREV = {"mr", "mrs", "ms", "dr", "prof", "no", "vs", "e.g", "i.e", "approx",
          "etc", "st", "fig", "cf", "rev", "ca", "nos"}


def split_sentences(text):
    parts = [x for x in SENT_SPLIT.split(text.strip()) if x]
    out = []
    for p in parts:
        if out:
            last = out[-1].split()[-1].rstrip(".").lower() if out[-1].split() else ""
            if out[-1].endswith(".") and last in ABBREV:
                out[-1] += " " + p
                continue
        out.append(p)
    return out
MAX_FRAME = 3
MIN_FRAME_TOKENS = 4


def mask_tokens(s):
    out = []
    for tok in s.split():
        if any(c.isdigit() for c in tok):
            m = "0"
        else:
            letters = [c for c in tok if c.isalpha()]
            if letters and letters[0].isupper():
                m = "X"
            else:
                m = tok.strip(".,;:!?()\"'[]-–—").lower()
                if not m:
                    continue
        if out and out[-1] == m and m in ("0", "X"):
            continue
        out.append(m)
    return out


def frames_of(text):
    sents = split_sentences(text)
    return [" ".join(mask_tokens(x)) for x in sents], " ".join(mask_tokens(text))


def nwords(s):
    return len(s.split())


def check_file(path, args, global_frames):
    errors = []
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                errors.append(f"line {i}: empty line")
                continue
            try:
                rows.append((i, json.loads(line)))
            except json.JSONDecodeError as e:
                errors.append(f"line {i}: invalid JSON: {e}")
    is_lab = "lab_research" in os.path.basename(path)
    superseded_seen = collections.Counter()
    superseded_where = []  # (line, value)
    corrections = 0
    with_facts = 0
    nfacts = 0
    speakers = collections.Counter()
    sent_frames = collections.Counter()
    utt_frames = collections.Counter()
    short_frames = collections.Counter()
    # first pass for the "later correction" check
    olds_after = []  # (line, old)
    for i, r in rows:
        for c in r.get("corrects", []) or []:
            if isinstance(c, dict):
                olds_after.append((i, c.get("old")))
    for i, r in rows:
        if not isinstance(r, dict):
            errors.append(f"line {i}: not an object")
            continue
        if set(r) != KEYS:
            errors.append(f"line {i}: keys {sorted(r)} != {sorted(KEYS)}")
        sp = r.get("speaker")
        text = r.get("text")
        if sp not in SPEAKERS:
            errors.append(f"line {i}: bad speaker {sp!r}")
        speakers[sp] += 1
        if not isinstance(text, str) or not text.strip():
            errors.append(f"line {i}: empty or missing text")
            continue
        if is_lab and sp == "user" and not NAME_PREFIX.match(text):
            errors.append(f"line {i}: lab user utterance lacks 'Name: ' prefix: {text[:50]!r}")
        facts = r.get("facts", [])
        fact_values = set()
        if not isinstance(facts, list):
            errors.append(f"line {i}: facts is not a list")
            facts = []
        for fa in facts:
            if not isinstance(fa, dict) or set(fa) != {"fact", "anchor"}:
                errors.append(f"line {i}: bad fact entry {fa!r}")
                continue
            fv, an = fa["fact"], fa["anchor"]
            fact_values.add(fv)
            if not fv or fv not in text:
                errors.append(f"line {i}: fact {fv!r} not verbatim in text")
            if not an or an not in text:
                errors.append(f"line {i}: anchor {an!r} (fact {fv!r}) not verbatim in text")
            if fv and not 1 <= nwords(fv) <= 6:
                errors.append(f"line {i}: fact {fv!r} has {nwords(fv)} words (1-6)")
            if an and not 1 <= nwords(an) <= 4:
                errors.append(f"line {i}: anchor {an!r} has {nwords(an)} words (1-4)")
            if an and fv and an.strip().lower() == fv.strip().lower():
                errors.append(f"line {i}: anchor equals fact {fv!r}")
        if facts:
            with_facts += 1
            nfacts += len(facts)
        sup = r.get("superseded", [])
        if not isinstance(sup, list):
            errors.append(f"line {i}: superseded is not a list")
            sup = []
        for v in sup:
            if not isinstance(v, str) or not v or v not in text:
                errors.append(f"line {i}: superseded {v!r} not verbatim in text")
                continue
            if v in fact_values:
                errors.append(f"line {i}: superseded {v!r} is also listed as a fact")
            if not any(j > i and o == v for j, o in olds_after):
                errors.append(f"line {i}: superseded {v!r} is never corrected later")
            superseded_seen[v] += 1
        corr = r.get("corrects", [])
        if not isinstance(corr, list):
            errors.append(f"line {i}: corrects is not a list")
            corr = []
        for c in corr:
            if not isinstance(c, dict) or set(c) != {"old", "new", "anchor"}:
                errors.append(f"line {i}: bad corrects entry {c!r}")
                continue
            corrections += 1
            for k in ("old", "new", "anchor"):
                if not c[k] or c[k] not in text:
                    errors.append(f"line {i}: corrects.{k} {c[k]!r} not verbatim in text")
            if c["new"] not in fact_values:
                errors.append(f"line {i}: corrects.new {c['new']!r} not listed in facts")
            if c["old"] == c["new"]:
                errors.append(f"line {i}: corrects old == new {c['old']!r}")
            if superseded_seen[c["old"]] == 0:
                errors.append(f"line {i}: corrects.old {c['old']!r} not superseded in an earlier utterance")
        sfs, uf = frames_of(text)
        for fr in sfs:
            if len(fr.split()) >= MIN_FRAME_TOKENS:
                sent_frames[fr] += 1
                global_frames[fr] += 1
            else:
                short_frames[fr] += 1
        if len(uf.split()) >= MIN_FRAME_TOKENS:
            utt_frames[uf] += 1
    # an outdated value must not survive inside any fact of the file,
    # otherwise "keep the fact" and "drop the old value" contradict each other
    all_facts = [(i, fa.get("fact", "")) for i, r in rows if isinstance(r, dict)
                 for fa in (r.get("facts") or []) if isinstance(fa, dict)]
    for old in sorted(superseded_seen):
        for i, fv in all_facts:
            if old and old in fv:
                errors.append(f"line {i}: fact {fv!r} contains the superseded value {old!r}")
    n = len(rows)
    share = with_facts / n if n else 0.0
    if n < args.min_utterances:
        errors.append(f"only {n} utterances (< {args.min_utterances})")
    if not args.min_share <= share <= args.max_share:
        errors.append(f"share of utterances with facts {share:.3f} outside [{args.min_share}, {args.max_share}]")
    if corrections < n / 30:
        errors.append(f"only {corrections} corrections (< utterances/30 = {n / 30:.1f})")
    for fr, k in sent_frames.items():
        if k > MAX_FRAME:
            errors.append(f"sentence frame repeated {k}x: {fr!r}")
    for fr, k in utt_frames.items():
        if k > MAX_FRAME:
            errors.append(f"utterance frame repeated {k}x: {fr!r}")
    print(f"== {path}")
    print(f"   utterances: {n}  speakers: {dict(speakers)}")
    print(f"   utterances with facts: {with_facts} ({share:.1%}), facts: {nfacts}")
    print(f"   corrections: {corrections}, superseded values: {sum(superseded_seen.values())}")
    top = sent_frames.most_common(1)
    print(f"   most repeated sentence frame (>= {MIN_FRAME_TOKENS} tokens): "
          f"{top[0][1] if top else 0}x {top[0][0] if top else ''!r}")
    print(f"   exempt short frames, top 5: {short_frames.most_common(5)}")
    return errors


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--min-utterances", type=int, default=560)
    ap.add_argument("--min-share", type=float, default=0.30)
    ap.add_argument("--max-share", type=float, default=0.40)
    args = ap.parse_args()
    files = args.files or [os.path.join(here, "mortgage_advice.jsonl"),
                           os.path.join(here, "lab_research.jsonl")]
    global_frames = collections.Counter()
    bad = 0
    for p in files:
        errs = check_file(p, args, global_frames)
        for e in errs:
            print("   ERROR", e)
        bad += len(errs)
    if len(files) > 1:
        for fr, k in global_frames.items():
            if k > MAX_FRAME:
                print(f"   ERROR across files: sentence frame repeated {k}x: {fr!r}")
                bad += 1
    print("PASS" if bad == 0 else f"FAIL ({bad} errors)")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
