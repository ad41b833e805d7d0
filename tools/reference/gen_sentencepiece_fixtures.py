#!/usr/bin/python3
"""SentencePiece BPE fixtures for tformer's own SentencePiece tokenizer (src/tokenizer/sentencepiece.h),
made by the real tools: Debian's `spm_train` trains the models, `python3-sentencepiece` (the
sentencepiece library) encodes and decodes the texts.

The corpus is generated here (seeded): sentences in English, Greek, Russian, Chinese, Japanese,
Arabic and Hindi, mixed with emoji, accented and full-width letters, ligatures, circled digits and
numbers, with runs of spaces and tabs. The models:
  multi        spm_train defaults (nmt_nfkc normalization, dummy prefix, extra whitespace removed)
  multi_bf     the same with --byte_fallback=true (characters outside the vocabulary as <0xXX>)
  llamaish     Llama's settings: identity normalization, byte fallback, whitespace kept, digits
               split, two user-defined symbols and a control symbol
  suffix       --treat_whitespace_as_suffix with no dummy prefix, identity normalization
The texts: 300 sentences of the same languages (with rare characters the vocabularies lack),
plus, for llamaish, the user-defined symbols inside text.

  /usr/bin/python3 tools/reference/gen_sentencepiece_fixtures.py
      writes tests/fixtures/sentencepiece/<model>.model and <model>.json ({"texts", "ids", "decoded"})
  /usr/bin/python3 tools/reference/gen_sentencepiece_fixtures.py --check build/tformer
      (make test-interop) trains the models afresh in a temporary folder and compares
      `tformer tokenize --tokenizer spm:MODEL` with the library on every text; exit 1 on a difference.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

import sentencepiece as spm

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "sentencepiece")

WORDS = {
    "en": "the quick brown fox jumps over lazy dog and then runs away from home into the forest".split(),
    "el": "ο γρήγορος καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο και τρέχει".split(),
    "ru": "быстрая коричневая лиса прыгает через ленивую собаку и убегает домой".split(),
    "zh": ["我们", "今天", "去", "学校", "学习", "中文", "非常", "好", "天气", "朋友", "吃饭", "喜欢"],
    "ja": ["東京", "は", "日本", "の", "首都", "です", "ひらがな", "カタカナ", "漢字", "こんにちは"],
    "ar": "الثعلب البني السريع يقفز فوق الكلب الكسول ويركض".split(),
    "hi": "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है".split(),
    "mix": ["🙂", "👍🏽", "€100", "café", "naïve", "Straße", "ＦＵＬＬ", "ｗｉｄｔｈ", "①②③", "ﬁ", "1234", "3.14", "x+y=z"],
}

MODELS = {
    "multi": ["--vocab_size=800"],
    "multi_bf": ["--vocab_size=900", "--byte_fallback=true"],
    "llamaish": ["--vocab_size=900", "--byte_fallback=true", "--normalization_rule_name=identity",
                 "--remove_extra_whitespaces=false", "--split_digits=true",
                 "--user_defined_symbols=<|user|>,<|assistant|>", "--control_symbols=<ctl>"],
    "suffix": ["--vocab_size=700", "--treat_whitespace_as_suffix=true", "--add_dummy_prefix=false",
               "--normalization_rule_name=identity"],
}


def sentence(rng, lo, hi):
    lang = rng.choice(list(WORDS))
    sep = "" if lang in ("zh", "ja") else " "
    return sep.join(rng.choice(WORDS[lang]) for _ in range(rng.randint(lo, hi)))


def corpus():
    rng = random.Random(3)
    lines = []
    for _ in range(6000):
        s = sentence(rng, 3, 14)
        if rng.random() < 0.2:
            s += " " + rng.choice(WORDS["mix"])
        if rng.random() < 0.1:
            s = "  " + s + "   "
        lines.append(s)
    return "\n".join(lines) + "\n"


def texts(model):
    rng = random.Random(4)
    out = []
    for _ in range(300):
        s = rng.choice([" ", "  ", "\t", ""]).join(sentence(rng, 1, 6) for _ in range(rng.randint(1, 5)))
        if rng.random() < 0.3:
            s = rng.choice(["  ", " ", "\t"]) + s + rng.choice(["", "  ", " "])
        if rng.random() < 0.2:
            s += " 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓ ½ ™ Ⅻ"
        if rng.random() < 0.1:
            s += " ɐ ʃ ǂ ꙮ"  # characters no vocabulary has
        if model == "llamaish" and rng.random() < 0.3:
            s = "<|user|>" + s + "<|assistant|> <ctl>"
        out.append(s)
    return out


def train(folder):
    with open(os.path.join(folder, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(corpus())
    for name, flags in MODELS.items():
        subprocess.run(["spm_train", f"--input={folder}/corpus.txt", f"--model_prefix={folder}/{name}",
                        "--model_type=bpe", "--minloglevel=2"] + flags, check=True, capture_output=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        tformer = sys.argv[2]
        bad = 0
        with tempfile.TemporaryDirectory() as d:
            train(d)
            for name in MODELS:
                model = os.path.join(d, name + ".model")
                sp = spm.SentencePieceProcessor(model_file=model)
                wrong = 0
                for t in texts(name):
                    mine = subprocess.run([tformer, "tokenize", "--tokenizer", "spm:" + model, "--text", t],
                                          check=True, capture_output=True, text=True).stdout.split()
                    if [int(x) for x in mine] != sp.encode(t):
                        wrong += 1
                        if wrong <= 3:
                            print(f"FAIL sentencepiece {name}: {t!r}: tformer {mine} library {sp.encode(t)}")
                print(f"{'ok  ' if wrong == 0 else 'FAIL'} sentencepiece {name}: {300 - wrong} of 300 texts "
                      "tokenized identically")
                bad += wrong
        sys.exit(1 if bad else 0)
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        train(d)
        for name in MODELS:
            model = os.path.join(d, name + ".model")
            with open(model, "rb") as src, open(os.path.join(OUT, name + ".model"), "wb") as dst:
                dst.write(src.read())
            sp = spm.SentencePieceProcessor(model_file=model)
            ts = texts(name)
            ids = [sp.encode(t) for t in ts]
            with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
                json.dump({"texts": ts, "ids": ids, "decoded": [sp.decode(i) for i in ids]}, f, ensure_ascii=False)
                f.write("\n")
            print(f"{name}: {sp.get_piece_size()} pieces, {sum(map(len, ids))} ids over {len(ts)} texts")


if __name__ == "__main__":
    main()
