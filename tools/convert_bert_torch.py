#!/usr/bin/env python3
"""A PyTorch twin of convert_bert's stage 1 (attention distillation), for speed comparisons.

Same recipe as the engine's stage 1 (train/convert.cpp, REFERENCE.md §3): an HF
BertForSequenceClassification with every self-attention's softmax swapped for the Hedgehog
feature map (per layer and head: W (D,F) = I, b = 0 at init; φ(x) = [softmax(xW + b),
softmax(-(xW + b))] over F), the original weights frozen, only the maps trained with AdamW (lr
1e-2, wd 0) on the soft cross-entropy between the teacher's softmax weights (from the same q, k,
no grad) and the student's quadratic linear weights, per head averaged over batch and query rows,
summed over heads and layers. The student's output feeds the next layer. Data: one GLUE task's
train.tsv, tokenized with the model folder's tokenizer (pairs for pair tasks, truncation to
--max-length, padding to each batch's longest row, the mask on the keys), batches in file order.

Prints distillation tokens/s (real, unpadded tokens, as convert_bert's "tokens_per_second"),
timed over the epoch after --warmup steps.

    python3 tools/convert_bert_torch.py --model DIR --task CoLA --data DIR/CoLA [--threads 2]

Tooling only: the C++ build and tests never need it.
"""
import argparse
import csv
import math
import os
import sys
import time

PAIR_COLUMNS = {  # task -> (header of sentence a, of sentence b or None); CoLA has no header
    "sst2": ("sentence", None), "mrpc": ("#1 String", "#2 String"), "stsb": ("sentence1", "sentence2"),
    "qqp": ("question1", "question2"), "mnli": ("sentence1", "sentence2"), "qnli": ("question", "sentence"),
    "rte": ("sentence1", "sentence2"),
}


def read_texts(task, path, limit):
    key = task.lower().replace("-", "").replace("_", "")
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if key == "cola":
        for line in lines:
            if line:
                rows.append((line.rstrip("\r").split("\t")[3], None))
    else:
        head = lines[0].rstrip("\r").split("\t")
        a, b = PAIR_COLUMNS[key]
        ia, ib = head.index(a), head.index(b) if b else None
        for line in lines[1:]:
            if line:
                fields = line.rstrip("\r").split("\t")
                rows.append((fields[ia], fields[ib] if ib is not None else None))
    return rows[:limit] if limit > 0 else rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--data", required=True, help="the task's GLUE folder (train.tsv)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--max-train", type=int, default=-1)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3, help="steps not timed")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = BertForSequenceClassification.from_pretrained(args.model, attn_implementation="eager").to(dev).eval()
    for p in model.parameters():
        p.requires_grad_(False)

    ctx = {"key_mask": None, "losses": []}
    maps = []

    def hedgehog(x, W, b):  # x (B,H,L,D), W (H,D,F), b (H,F) -> (B,H,L,2F)
        z = torch.einsum("bhld,hdf->bhlf", x, W) + b[None, :, None, :]
        return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)

    def make_forward(att, W, b):
        H, D = att.num_attention_heads, att.attention_head_size

        def forward(hidden_states, attention_mask=None, **kwargs):
            B, L, _ = hidden_states.shape
            q = att.query(hidden_states).view(B, L, H, D).transpose(1, 2)
            k = att.key(hidden_states).view(B, L, H, D).transpose(1, 2)
            v = att.value(hidden_states).view(B, L, H, D).transpose(1, 2)
            keep = ctx["key_mask"][:, None, None, :]  # (B,1,1,L)
            with torch.no_grad():
                s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
                P = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)
            A = (hedgehog(q, W, b) @ hedgehog(k, W, b).transpose(-1, -2)) * keep
            Q = A / (A.sum(-1, keepdim=True) + 1e-6)
            ce = -(P * torch.log(Q.clamp_min(1e-12))).sum(-1).mean(dim=(0, 2))  # (H)
            ctx["losses"].append(ce.sum())
            out = (Q @ v).transpose(1, 2).reshape(B, L, H * D)
            return out, None

        return forward

    for layer in model.bert.encoder.layer:
        att = layer.attention.self
        H, D = att.num_attention_heads, att.attention_head_size
        W = torch.nn.Parameter(torch.eye(D, device=dev).repeat(H, 1, 1))
        b = torch.nn.Parameter(torch.zeros(H, D, device=dev))
        maps += [W, b]
        att.forward = make_forward(att, W, b)
    opt = torch.optim.AdamW(maps, lr=args.lr, weight_decay=0.0)

    rows = read_texts(args.task, os.path.join(args.data, "train.tsv"), args.max_train)
    batches = []
    for i in range(0, len(rows), args.batch):
        chunk = rows[i:i + args.batch]
        a = [r[0] for r in chunk]
        bb = [r[1] for r in chunk] if chunk[0][1] is not None else None
        enc = tok(a, bb, truncation=True, max_length=args.max_length, padding="longest", return_tensors="pt")
        batches.append({k: v.to(dev) for k, v in enc.items()})

    steps = tokens = 0
    seconds = 0.0
    for epoch in range(args.epochs):
        loss_sum = 0.0
        for enc in batches:
            t0 = time.perf_counter()
            ctx["key_mask"] = enc["attention_mask"].bool()
            ctx["losses"] = []
            model(input_ids=enc["input_ids"], token_type_ids=enc.get("token_type_ids"),
                  attention_mask=enc["attention_mask"])
            loss = torch.stack(ctx["losses"]).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            steps += 1
            loss_sum += loss.item()
            if steps > args.warmup:
                seconds += time.perf_counter() - t0
                tokens += int(enc["attention_mask"].sum())
        print(f"epoch {epoch + 1}: mean distillation loss {loss_sum / len(batches):.4f}", file=sys.stderr)
    print(f"torch stage 1 (hedgehog distillation): {steps} steps, {tokens} timed tokens in {seconds:.3f} s: "
          f"{tokens / max(seconds, 1e-9):.1f} tokens/s (threads {torch.get_num_threads()}, device {dev})")


if __name__ == "__main__":
    main()
