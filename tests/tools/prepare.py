# SPDX-License-Identifier: MIT
"""ptxgen-prepare end to end, with no download: a small byte-level BPE
tokenizer trained here, a ChatML chat template in the style of Qwen2's, a
tiny Qwen2 config.json; JSONL files of the three forms. Checks the ids
against the tokenizer, the masks against the turns, every refusal (file,
line and field named, exit 2, the output untouched), and that the C
reader and batcher (td_dump) read the file as this test reads it, with
the batches computed here from docs/data.md.

    prepare.py PTXGEN_PREPARE TD_DUMP
"""

import hashlib
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile

failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print('FAIL: %s' % what, file=sys.stderr)
    return cond


def check_eq(got, want, what):
    return check(got == want, '%s:\n  got:      %r\n  expected: %r' % (what, got, want))


try:
    import jinja2  # noqa: F401  (ptxgen-prepare needs it; the test uses it only through it)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:
    print('prepare: %s: the data tests need the Python packages tokenizers and jinja2: '
          'pip install tokenizers jinja2 (tools/setup.sh installs them into .venv/)' % e,
          file=sys.stderr)
    sys.exit(1)

PREPARE, TD_DUMP = sys.argv[1], sys.argv[2]
IGNORE = -100
SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<|begin|>']

# A ChatML template like Qwen2's: a default system turn, each turn between
# <|im_start|>ROLE\n and <|im_end|>\n, an unknown role refused.
CHATML = (
    "{%- for message in messages %}\n"
    "{%- if loop.first and message['role'] != 'system' %}\n"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] %}\n"
    "{{- raise_exception('the role ' + message['role'] + ' is not system, user or assistant') }}\n"
    "{%- endif %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")

# The same with {% generation %} around what the assistant writes: its
# content and <|im_end|>, not the line end after it.
CHATML_GEN = (
    "{%- for message in messages %}\n"
    "{%- if loop.first and message['role'] != 'system' %}\n"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}\n"
    "{%- if message['role'] == 'assistant' %}\n"
    "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}\n"
    "{{- '\\n' }}\n"
    "{%- else %}\n"
    "{{- message['content'] + '<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n")


def chatml(messages):
    """The template's rendering, written out by hand."""
    out = ''
    if messages[0]['role'] != 'system':
        out += '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n'
    for m in messages:
        out += '<|im_start|>%s\n%s<|im_end|>\n' % (m['role'], m['content'])
    return out


# ---------------------------------------------------------------- the model directory

def make_tokenizer(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    corpus = ['the quick brown fox jumps over the lazy dog',
              'hello world, how are you today?',
              'Question: what is the capital of France? Answer: Paris',
              'I am a helpful assistant and I answer questions.'] * 4
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.save(path)
    return Tokenizer.from_file(path)


def write_json(path, obj):
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(obj, f, ensure_ascii=False)


def make_model(d, template=CHATML, config_template=True, **extra):
    os.makedirs(d, exist_ok=True)
    tok = make_tokenizer(os.path.join(d, 'tokenizer.json'))
    cfg = {'eos_token': '<|im_end|>', 'pad_token': '<|endoftext|>', 'bos_token': None,
           'model_max_length': 32768}
    if config_template:
        cfg['chat_template'] = template
    cfg.update(extra)
    write_json(os.path.join(d, 'tokenizer_config.json'), cfg)
    # A tiny random Qwen2 (the C tests' write_hf_config writes the same).
    write_json(os.path.join(d, 'config.json'), {
        'model_type': 'qwen2', 'hidden_size': 32, 'intermediate_size': 64,
        'num_hidden_layers': 2, 'num_attention_heads': 4, 'num_key_value_heads': 2,
        'vocab_size': 384, 'rms_norm_eps': 1e-6, 'rope_theta': 10000.0,
        'tie_word_embeddings': True})
    return tok


# ---------------------------------------------------------------- running

def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return p.returncode, p.stdout.decode('utf-8', 'replace'), p.stderr.decode('utf-8', 'replace')


def prepare(*args, env=None):
    return run([sys.executable, PREPARE] + list(args), env=env)


def write_jsonl(path, lines):
    with open(path, 'wb') as f:
        for line in lines:
            if isinstance(line, bytes):
                f.write(line + b'\n')
            elif isinstance(line, str):
                f.write(line.encode('utf-8') + b'\n')
            else:
                f.write(json.dumps(line, ensure_ascii=False).encode('utf-8') + b'\n')


# ---------------------------------------------------------------- the file, read here

def read_pgtok(path):
    with open(path, 'rb') as f:
        b = f.read()
    (magic, version, header, flags, vocab, n_docs, n_tokens, eos, pad,
     sha) = struct.unpack_from('<8sIIIIQQii32s', b, 0)
    check_eq(magic, b'PGTOKENS', 'magic')
    check_eq((version, header), (1, 128), 'version and header size')
    check_eq(b[80:128], bytes(48), 'reserved bytes')
    offsets = list(struct.unpack_from('<%dQ' % (n_docs + 1), b, 128))
    ids_at = 128 + 8 * (n_docs + 1)
    mask_at = ids_at + (4 * n_tokens + 7) // 8 * 8
    check_eq(len(b), mask_at + (n_tokens + 7) // 8 * 8, 'file length')
    ids = list(struct.unpack_from('<%di' % n_tokens, b, ids_at))
    mask = list(b[mask_at:mask_at + n_tokens])
    docs = [(ids[offsets[i]:offsets[i + 1]], mask[offsets[i]:offsets[i + 1]])
            for i in range(n_docs)]
    return {'flags': flags, 'vocab': vocab, 'eos': eos, 'pad': pad, 'sha256': sha,
            'docs': docs, 'tokens': n_tokens}


# ---------------------------------------------------------------- batches, computed here

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def order(n, shuffle, seed, epoch):
    p = list(range(n))
    if not shuffle:
        return p
    state = mix64(seed ^ mix64(epoch))
    for i in range(n - 1, 0, -1):
        state = (state + 0x9e3779b97f4a7c15) & M64
        j = mix64(state) % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def expected_batches(data, B, S, pad_mode, shuffle, seed, epochs):
    """docs/data.md's rows, in batches of B: lists of (ids, labels, pos,
    doc_start) per batch with its data rows, target and truncation counts."""
    docs = data['docs']
    rows = []  # (pieces, truncated): a piece is (doc, start, length)
    for e in range(epochs):
        cur, col = [], 0
        for d in order(len(docs), shuffle, seed, e):
            n = len(docs[d][0])
            if pad_mode:
                rows.append(([(d, 0, min(n, S))], n > S))
                continue
            start = 0
            while start < n:
                take = min(n - start, S - col)
                cur.append((d, start, take))
                col += take
                start += take
                if col == S:
                    rows.append((cur, False))
                    cur, col = [], 0
        if cur:
            rows.append((cur, False))
    out = []
    for k in range(0, len(rows), B):
        ids, labels, pos, ds = [], [], [], []
        n_rows = n_targets = n_trunc = 0
        for r in range(B):
            pieces, trunc = rows[k + r] if k + r < len(rows) else ([], False)
            n_rows += bool(pieces)
            n_trunc += trunc
            col = 0
            for d, start, take in pieces:
                di, dm = docs[d]
                for j in range(take):
                    ids.append(di[start + j])
                    t = j + 1 < take and dm[start + j + 1] == 1
                    labels.append(di[start + j + 1] if t else IGNORE)
                    n_targets += t
                    pos.append(j)
                    ds.append(col)
                col += take
            for j in range(S - col):
                ids.append(data['pad'])
                labels.append(IGNORE)
                pos.append(j)
                ds.append(col)
        out.append({'rows': n_rows, 'targets': n_targets, 'truncated': n_trunc, 'ids': ids,
                    'labels': labels, 'pos': pos, 'doc_start': ds})
    return out


def td_dump(path, *args):
    rc, out, err = run([TD_DUMP, path] + list(args))
    lines = [json.loads(x) for x in out.splitlines()]
    return rc, lines, err


def agree(path, data, B, S, pad_mode=False, shuffle=False, seed=0, epochs=1):
    args = ['--batch', str(B), '--seq', str(S), '--epochs', str(epochs)]
    args += ['--pad'] if pad_mode else []
    args += ['--shuffle', str(seed)] if shuffle else []
    rc, lines, err = td_dump(path, *args)
    what = 'td_dump %s %s' % (os.path.basename(path), ' '.join(args))
    if not check_eq(rc, 0, what + ' exit (%s)' % err.strip()):
        return []
    info = lines[0]
    check_eq(info['docs'], len(data['docs']), what + ': docs')
    check_eq(info['tokens'], data['tokens'], what + ': tokens')
    check_eq(info['targets'], sum(sum(m[1:]) for _, m in data['docs']), what + ': targets')
    check_eq(info['longest'], max(len(i) for i, _ in data['docs']), what + ': longest')
    check_eq((info['vocab'], info['eos'], info['pad'], info['flags']),
             (data['vocab'], data['eos'], data['pad'], data['flags']), what + ': header')
    check_eq(info['sha256'], data['sha256'].hex(), what + ': tokenizer sha256')
    want = expected_batches(data, B, S, pad_mode, shuffle, seed, epochs)
    got = lines[1:]
    check_eq(len(got), len(want), what + ': batches')
    for k, (g, w) in enumerate(zip(got, want)):
        for key in ('rows', 'targets', 'truncated', 'ids', 'labels', 'pos', 'doc_start'):
            if not check_eq(g[key], w[key], '%s: batch %d %s' % (what, k, key)):
                break
    return got


# ---------------------------------------------------------------- the tests

def test_formats(tmp, model, tok):
    out = os.path.join(tmp, 'out.pgtok')
    texts = ['the quick brown fox jumps over the lazy dog', 'héllo wörld 😀, how are you?',
             'x']
    pcs = [('Question: what is the capital of France? Answer:', ' Paris'),
           ('hello', ' world, how are you today?'),
           ('', 'the lazy dog')]
    convs = [
        [{'role': 'user', 'content': 'hello'}, {'role': 'assistant', 'content': 'hello world'}],
        [{'role': 'system', 'content': 'Answer questions.'},
         {'role': 'user', 'content': 'what is the capital of France?'},
         {'role': 'assistant', 'content': 'Paris'},
         {'role': 'user', 'content': 'and the fox?'},
         {'role': 'assistant', 'content': 'the quick brown fox 🦊'}],
    ]
    im_end = tok.token_to_id('<|im_end|>')
    path = os.path.join(tmp, 'all.jsonl')
    write_jsonl(path, [{'text': t, 'id': i} for i, t in enumerate(texts)] + [''] +
                [{'prompt': p, 'completion': c} for p, c in pcs] + ['   '] +
                [{'messages': m} for m in convs])
    rc, so, se = prepare('--model', model, '--input', path, '--output', out)
    check_eq(rc, 0, 'prepare all.jsonl (%s)' % se.strip())
    check('%s: 8 documents (text 3, prompt-completion 3, messages 2)' % out in so,
          'summary: %r' % so)
    data = read_pgtok(out)
    with open(os.path.join(model, 'tokenizer.json'), 'rb') as f:
        check_eq(data['sha256'], hashlib.sha256(f.read()).digest(), 'tokenizer sha256')
    check_eq(data['vocab'], tok.get_vocab_size(with_added_tokens=True), 'vocab size')
    check_eq(data['eos'], im_end, 'eos id')
    check_eq(data['pad'], tok.token_to_id('<|endoftext|>'), 'pad id')
    check_eq(data['flags'], 1, 'flags (EOS)')
    docs = data['docs']
    check_eq(len(docs), 8, 'documents')
    for i, t in enumerate(texts):
        ids, mask = docs[i]
        check_eq(ids, tok.encode(t).ids + [im_end], 'text %d ids' % i)
        check_eq(mask, [0] + [1] * (len(ids) - 1), 'text %d mask' % i)
    for i, (p, c) in enumerate(pcs):
        ids, mask = docs[3 + i]
        want = tok.encode(p + c).ids
        check_eq(ids, want + [im_end], 'prompt-completion %d ids' % i)
        n_prompt = len(tok.encode(p).ids) if p else 0
        check_eq(mask, [0] * max(n_prompt, 1) + [1] * (len(ids) - max(n_prompt, 1)),
                 'prompt-completion %d mask' % i)
        trained = [x for x, m in zip(ids, mask) if m]
        if p:
            check_eq(tok.decode(trained, skip_special_tokens=False), c + '<|im_end|>',
                     'prompt-completion %d: the targets are the completion' % i)
    for i, conv in enumerate(convs):
        ids, mask = docs[6 + i]
        text = chatml(conv)
        check_eq(ids, tok.encode(text, add_special_tokens=False).ids, 'messages %d ids' % i)
        runs, cur = [], []
        for x, m in zip(ids, mask):
            if m:
                cur.append(x)
            elif cur:
                runs.append(cur)
                cur = []
        if cur:
            runs.append(cur)
        check_eq([tok.decode(r, skip_special_tokens=False) for r in runs],
                 [m['content'] + '<|im_end|>\n' for m in conv if m['role'] == 'assistant'],
                 'messages %d: the targets are the assistant turns' % i)

    # --train-on all, --no-eos, --max-length
    out2 = os.path.join(tmp, 'out-all.pgtok')
    rc, so, se = prepare('--model', model, '--input', path, '--output', out2, '--train-on', 'all',
                         '--no-eos', '--max-length', '12')
    check_eq(rc, 0, 'prepare --train-on all (%s)' % se.strip())
    check('documents cut to --max-length 12' in so, 'summary of cuts: %r' % so)
    d2 = read_pgtok(out2)
    check_eq(d2['flags'], 2, 'flags (train all, no EOS)')
    check_eq(d2['docs'][0][0], tok.encode(texts[0]).ids[:12], 'text cut, no EOS')
    check_eq(d2['docs'][2][0], tok.encode('x').ids, 'a one-token document')
    for i, (ids, mask) in enumerate(d2['docs']):
        check(len(ids) <= 12, 'document %d within --max-length' % i)
        check_eq(mask, [0] + [1] * (len(ids) - 1), 'train-on all: document %d mask' % i)
    check_eq(d2['docs'][7][0], tok.encode(chatml(convs[1]), add_special_tokens=False).ids[:12],
             'messages cut')
    return data, out


def test_templates(tmp, tok_model, data_path, want):
    """The chat template from a named list, from chat_template.jinja, and
    with {% generation %}."""
    rc, so, se = prepare('--model', tok_model, '--input', data_path, '--output',
                         os.path.join(tmp, 'ref.pgtok'))
    with open(os.path.join(tmp, 'ref.pgtok'), 'rb') as f:
        ref = f.read()
    variants = {
        'named': dict(template=[{'name': 'tool_use', 'template': 'not this one {{'},
                                {'name': 'default', 'template': CHATML}]),
        'jinja': dict(config_template=False),
        'both': dict(template='{{ raise_exception("the config template was used") }}'),
    }
    for name, kw in variants.items():
        d = os.path.join(tmp, 'model-' + name)
        make_model(d, **kw)
        if name in ('jinja', 'both'):
            with open(os.path.join(d, 'chat_template.jinja'), 'w') as f:
                f.write(CHATML)
        out = os.path.join(tmp, name + '.pgtok')
        rc, so, se = prepare('--model', d, '--input', data_path, '--output', out)
        check_eq(rc, 0, 'template %s (%s)' % (name, se.strip()))
        with open(out, 'rb') as f:
            check(f.read() == ref, 'template %s: the same file' % name)

    d = os.path.join(tmp, 'model-gen')
    tok = make_model(d, template=CHATML_GEN)
    conv = [{'role': 'user', 'content': 'hello'},
            {'role': 'assistant', 'content': 'hello world'},
            {'role': 'user', 'content': 'and?'},
            {'role': 'assistant', 'content': 'the lazy dog'}]
    path = os.path.join(tmp, 'gen.jsonl')
    write_jsonl(path, [{'messages': conv}])
    out = os.path.join(tmp, 'gen.pgtok')
    rc, so, se = prepare('--model', d, '--input', path, '--output', out)
    check_eq(rc, 0, 'generation template (%s)' % se.strip())
    ids, mask = read_pgtok(out)['docs'][0]
    check_eq(ids, tok.encode(chatml(conv), add_special_tokens=False).ids, 'generation ids')
    want_mask = []
    for m in [{'role': 'system', 'content': 'You are a helpful assistant.'}] + conv:
        head = tok.encode('<|im_start|>%s\n' % m['role'], add_special_tokens=False).ids
        body = tok.encode(m['content'] + '<|im_end|>', add_special_tokens=False).ids
        nl = tok.encode('\n', add_special_tokens=False).ids
        on = 1 if m['role'] == 'assistant' else 0
        want_mask += [0] * len(head) + [on] * len(body) + [0] * len(nl)
    check_eq(mask, want_mask, 'generation spans: content and <|im_end|>, not the line end')

    # Where transformers is installed (CI does not need it): the same ids as
    # its apply_chat_template, and the same mask as its assistant mask.
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        print('transformers is not installed: no comparison with apply_chat_template',
              file=sys.stderr)
    else:
        ref = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, 'tokenizer.json'),
                                      eos_token='<|im_end|>', pad_token='<|endoftext|>')
        ref.chat_template = CHATML_GEN
        r = ref.apply_chat_template(conv, tokenize=True, return_dict=True,
                                    return_assistant_tokens_mask=True)
        check_eq(ids, list(r['input_ids']), 'ids as apply_chat_template gives them')
        check_eq(mask, list(r['assistant_masks']), 'mask as transformers\' assistant mask')

    # add_bos_token: BOS before text, none added to a chat (its template
    # writes what it wants).
    d = os.path.join(tmp, 'model-bos')
    tok = make_model(d, bos_token='<|begin|>', add_bos_token=True)
    out = os.path.join(tmp, 'bos.pgtok')
    rc, so, se = prepare('--model', d, '--input', data_path, '--output', out)
    check_eq(rc, 0, 'add_bos_token (%s)' % se.strip())
    got = read_pgtok(out)['docs']
    bos = tok.token_to_id('<|begin|>')
    check_eq(got[0][0], [bos] + want[0][0], 'BOS before text')
    check_eq(got[0][1], [0] + [1] * len(want[0][0]), 'BOS is no target')
    check_eq(got[7][0], want[7][0], 'no BOS added to a chat')


def test_agreement(tmp, data, path):
    """The C batcher against the batches computed here."""
    agree(path, data, 3, 16)
    agree(path, data, 2, 7, shuffle=True, seed=5, epochs=3)
    agree(path, data, 4, 8, pad_mode=True, epochs=2)
    agree(path, data, 3, 64, pad_mode=True, shuffle=True, seed=11, epochs=2)
    agree(path, data, 1, 200)
    # resuming from a batch's "next" position gives the rest
    args = ['--batch', '2', '--seq', '9', '--shuffle', '3', '--epochs', '3']
    rc, full, err = td_dump(path, *args)
    check_eq(rc, 0, 'td_dump for resuming (%s)' % err.strip())
    for k in (0, 3, 7):
        pos = json.dumps(full[1 + k]['next'])
        rc, rest, err = td_dump(path, *(args + ['--from', pos]))
        check_eq(rc, 0, 'td_dump --from %s (%s)' % (pos, err.strip()))
        strip = [{key: v for key, v in b.items() if key != 'batch'} for b in rest[1:]]
        check(strip == [{key: v for key, v in b.items() if key != 'batch'} for b in full[2 + k:]],
              'resumed from batch %d: the same batches' % k)
    # the tokenizer fingerprint, as C computes it
    tj = os.path.join(tmp, 'model', 'tokenizer.json')
    rc, _, err = td_dump(path, '--check-model', '384', tj)
    check_eq(rc, 0, 'td_check_model with the tokenizer (%s)' % err.strip())
    other = os.path.join(tmp, 'model-gen', 'tokenizer.json')
    with open(other, 'a') as f:
        f.write(' ')
    rc, _, err = td_dump(path, '--check-model', '384', other)
    check_eq(rc, 2, 'td_check_model with another tokenizer')
    check('prepared with another tokenizer' in err, 'mismatch message: %r' % err)
    rc, _, err = td_dump(path, '--check-model', '100')
    check('more than the model\'s vocabulary of 100' in err, 'vocabulary message: %r' % err)
    rc, _, err = td_dump(os.path.join(tmp, 'all.jsonl'))
    check_eq(rc, 2, 'td_dump of the JSONL')
    check('JSON text, not prepared training data: run ptxgen-prepare' in err,
          'JSONL message: %r' % err)


def refuse(tmp, model, lines, want, *extra, code=2, raw=None, env=None):
    """ptxgen-prepare refuses with one line containing want and leaves the
    output and its directory as they were."""
    outdir = os.path.join(tmp, 'refuse')
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    out = os.path.join(outdir, 'out.pgtok')
    with open(out, 'wb') as f:
        f.write(b'OLD')
    path = os.path.join(tmp, 'bad.jsonl')
    if raw is not None:
        with open(path, 'wb') as f:
            f.write(raw)
    elif lines is not None:
        write_jsonl(path, lines)
    args = list(extra)
    if '--model' not in args and '--no-model' not in args:
        args += ['--model', model]
    args = [a for a in args if a != '--no-model']
    if '--input' not in args:
        args += ['--input', path]
    if '--output' not in args:
        args += ['--output', out]
    rc, so, se = prepare(*args, env=env)
    what = 'refused %r' % want
    check_eq(rc, code, what + ' exit (%s)' % se.strip())
    check_eq(so, '', what + ': nothing on stdout')
    check(se.count('\n') == 1 and se.startswith('ptxgen-prepare: '), what + ': one line: %r' % se)
    check(want in se, what + ': got %r' % se)
    with open(out, 'rb') as f:
        check_eq(f.read(), b'OLD', what + ': the output unchanged')
    check_eq(sorted(os.listdir(outdir)), ['out.pgtok'], what + ': no temporary left')
    return se


def test_refusals(tmp, model):
    bad = os.path.join(tmp, 'bad.jsonl')
    ok = {'text': 'hello'}
    refuse(tmp, model, [ok, ok, '{"text": "a" "b"}'],
           "%s:3: bad JSON: Expecting ',' delimiter at column 14" % bad)
    refuse(tmp, model, [ok, '[1, 2]'], '%s:2: is a list, not a JSON object' % bad)
    refuse(tmp, model, [{'prompt': 'x'}], "%s:1: no 'completion' field" % bad)
    refuse(tmp, model, [ok, {'text': 5}], "%s:2: 'text': is a number, not a string" % bad)
    refuse(tmp, model, [{'text': ''}], "%s:1: 'text': is empty" % bad)
    refuse(tmp, model, [{'prompt': 'a', 'completion': ''}], "%s:1: 'completion': is empty" % bad)
    refuse(tmp, model, [{'prompt': None, 'completion': 'b'}],
           "%s:1: 'prompt': is null, not a string" % bad)
    refuse(tmp, model, [{'title': 'x'}],
           "%s:1: no 'text', 'prompt'/'completion' or 'messages' field" % bad)
    refuse(tmp, model, [{'text': 'a', 'messages': []}],
           '%s:1: fields of more than one format (text, messages): give --format' % bad)
    refuse(tmp, model, [{'text': 'a'}], "%s:1: no 'messages' field" % bad, '--format', 'messages')
    refuse(tmp, model, [{'messages': 'hi'}], "%s:1: 'messages': is a string, not a list" % bad)
    refuse(tmp, model, [{'messages': []}], "%s:1: 'messages': is empty" % bad)
    refuse(tmp, model, [{'messages': [{'content': 'x'}]}], "%s:1: messages[0]: no 'role'" % bad)
    refuse(tmp, model, [{'messages': [{'from': 'human', 'value': 'x'}]}],
           "%s:1: messages[0]: no 'role'" % bad)
    refuse(tmp, model, [{'messages': [{'role': 'user', 'content': ['x']}]}],
           "%s:1: messages[0]: 'content' is a list, not a string" % bad)
    refuse(tmp, model, [ok, {'messages': [{'role': 'user', 'content': 'hi'}]}],
           "%s:2: 'messages': no assistant turn to train on (roles: user)" % bad)
    refuse(tmp, model, [ok, ok, ok, {'messages': [{'role': 'bot', 'content': 'hi'},
                                                  {'role': 'assistant', 'content': 'x'}]}],
           "%s:4: 'messages': the chat template refused the conversation: the role bot is not "
           "system, user or assistant" % bad)
    refuse(tmp, model, None, '%s:2: not UTF-8' % bad, raw=b'{"text": "a"}\n{"text": "\xff"}\n')
    refuse(tmp, model, None, "%s:1: 'text': holds a lone surrogate (\\ud800 at character 1)"
           % bad, raw=b'{"text": "a\\ud800"}\n')
    refuse(tmp, model, None, '%s: no documents' % bad, raw=b'\n  \n')
    refuse(tmp, model, None, '%s: No such file or directory' % os.path.join(tmp, 'none.jsonl'),
           '--input', os.path.join(tmp, 'none.jsonl'))
    # the model's files
    nomodel = os.path.join(tmp, 'nomodel')
    refuse(tmp, model, [ok], '--model %s: not a directory' % nomodel, '--model', nomodel)
    os.makedirs(os.path.join(tmp, 'empty-model'), exist_ok=True)
    refuse(tmp, model, [ok], "%s: No such file or directory (ptxgen-prepare needs the fast "
           "tokenizer file)" % os.path.join(tmp, 'empty-model', 'tokenizer.json'),
           '--model', os.path.join(tmp, 'empty-model'))
    d = os.path.join(tmp, 'model-notemplate')
    make_model(d, config_template=False)
    refuse(tmp, model, [ok, {'messages': [{'role': 'user', 'content': 'hi'}]}],
           '%s: no chat_template (and no chat_template.jinja beside it): messages need one'
           % os.path.join(d, 'tokenizer_config.json'), '--model', d)
    d = os.path.join(tmp, 'model-noeos')
    make_model(d, eos_token=None)
    refuse(tmp, model, [ok], '%s:1: %s names no eos_token to end the document with: pass '
           '--no-eos' % (bad, os.path.join(d, 'tokenizer_config.json')), '--model', d)
    d = os.path.join(tmp, 'model-badeos')
    make_model(d, eos_token='</s>')
    refuse(tmp, model, [ok], "eos_token '</s>' is not a token of tokenizer.json", '--model', d)
    d = os.path.join(tmp, 'model-badtemplate')
    make_model(d, template='{% for %}')
    refuse(tmp, model, [{'messages': [{'role': 'assistant', 'content': 'hi'}]}],
           'chat_template: not a valid jinja template', '--model', d)
    # options
    refuse(tmp, model, [ok], '--max-length: 0 is outside [1, 2147483647] (see --help)',
           '--max-length', '0')
    refuse(tmp, model, [ok], 'option --format given more than once', '--format', 'text',
           '--format', 'text')
    refuse(tmp, model, [ok], 'unrecognized arguments: --frobnicate', '--frobnicate')
    refuse(tmp, model, [ok], "argument --format: invalid choice: 'json'", '--format', 'json')
    refuse(tmp, model, [ok], '--model is required', '--no-model')
    refuse(tmp, model, [ok], '--output %s is --input' % bad, '--output', bad)
    # missing packages: the one-line advice, exit 1
    fake = os.path.join(tmp, 'fake')
    os.makedirs(fake, exist_ok=True)
    with open(os.path.join(fake, 'tokenizers.py'), 'w') as f:
        f.write('raise ImportError("no tokenizers here")\n')
    env = dict(os.environ, PYTHONPATH=fake)
    refuse(tmp, model, [ok], "the Python package 'tokenizers' is missing: pip install tokenizers "
           "jinja2", code=1, env=env)


def test_cli(tmp, model):
    rc, so, se = prepare('--help')
    check_eq(rc, 0, '--help')
    so = ' '.join(so.split())
    for s in ('--model DIR', '--input FILE', '--output FILE', '(default: auto)',
              '(default: completion', '(default: appended', '(default: no limit)'):
        check(s in so, '--help shows %r' % s)
    rc, so, se = prepare('--version')
    check_eq(rc, 0, '--version')
    check(re.fullmatch(r'ptxgen-prepare \d+\.\d+\.\d+ \(data format 1\)\n', so) is not None,
          '--version: %r' % so)
    # A replaced file keeps its permission bits; the write is a rename.
    path = os.path.join(tmp, 'one.jsonl')
    write_jsonl(path, [{'text': 'hello'}])
    out = os.path.join(tmp, 'keep.pgtok')
    with open(out, 'wb') as f:
        f.write(b'OLD')
    os.chmod(out, 0o640)
    ino = os.stat(out).st_ino
    rc, so, se = prepare('--model', model, '--input', path, '--output', out)
    check_eq(rc, 0, 'replace (%s)' % se.strip())
    st = os.stat(out)
    check_eq(stat.S_IMODE(st.st_mode), 0o640, 'permission bits kept')
    check(st.st_ino != ino, 'replaced by a rename')
    check_eq(read_pgtok(out)['tokens'], len(make_tokenizer(os.path.join(tmp, 't.json'))
                                            .encode('hello').ids) + 1, 'the new file')


def main():
    tmp = tempfile.mkdtemp(prefix='pg-prepare-')
    try:
        model = os.path.join(tmp, 'model')
        tok = make_model(model)
        data, out = test_formats(tmp, model, tok)
        test_templates(tmp, model, os.path.join(tmp, 'all.jsonl'), data['docs'])
        test_agreement(tmp, data, out)
        test_refusals(tmp, model)
        test_cli(tmp, model)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d checks, %d failures' % (checks, failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
