// ort_attention.js: ONNX Runtime's CPU attention on the bench's shapes.
//
// For each shape it builds a one-node ONNX model in memory and times it:
//   - the standard opset-23 Attention (3-D inputs [B][L][heads*D],
//     q_num_heads / kv_num_heads, is_causal), which takes GQA and decode;
//   - com.microsoft MultiHeadAttention (num_heads, unidirectional for
//     causal), where H == Hkv and Lq == Lk.
// Before timing, each op is checked against a float64 reference in this
// file on small shapes, so a wrong model fails instead of timing nonsense.
// The protobuf encoding of the model is written out below (a few message
// types of onnx.proto), so onnxruntime-node is the only dependency.
//
// Usage (through ort.sh): node ort_attention.js [--threads 1,2]
//   [--shape "1,8,8,512,512,64;..."] [--json]
'use strict';
const ort = require('onnxruntime-node');

// ---- protobuf wire format: varints and length-delimited fields ----------
function varint(n) {
  const out = [];
  let v = BigInt(n);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return out;
}
const fieldInt = (f, n) => [...varint((f << 3) | 0), ...varint(n)];
const fieldBytes = (f, bytes) => [...varint((f << 3) | 2), ...varint(bytes.length), ...bytes];
const fieldStr = (f, s) => fieldBytes(f, [...Buffer.from(s, 'utf8')]);
const concat = (...parts) => parts.flat();

// onnx.proto field numbers: ModelProto{ir_version 1, producer_name 2,
// graph 7, opset_import 8}; OperatorSetIdProto{domain 1, version 2};
// GraphProto{node 1, name 2, input 11, output 12}; NodeProto{input 1,
// output 2, name 3, op_type 4, attribute 5, domain 7}; AttributeProto{name 1,
// i 3, type 20 (INT = 2)}; ValueInfoProto{name 1, type 2};
// TypeProto{tensor_type 1}; TypeProto.Tensor{elem_type 1 (FLOAT = 1),
// shape 2}; TensorShapeProto{dim 1}; Dimension{dim_value 1}.
const attrInt = (name, v) => concat(fieldStr(1, name), fieldInt(3, v), fieldInt(20, 2));
function valueInfo(name, dims) {
  const shape = concat(...dims.map((d) => fieldBytes(1, fieldInt(1, d))));
  const tensor = concat(fieldInt(1, 1), fieldBytes(2, shape));
  return concat(fieldStr(1, name), fieldBytes(2, fieldBytes(1, tensor)));
}
function model({ op, domain, attrs, inputs, output, opsets, ir }) {
  const node = concat(
    ...inputs.map(([n]) => fieldStr(1, n)), fieldStr(2, output[0]), fieldStr(3, 'attn'),
    fieldStr(4, op), ...attrs.map((a) => fieldBytes(5, a)), domain ? fieldStr(7, domain) : []);
  const graph = concat(fieldBytes(1, node), fieldStr(2, 'g'),
    ...inputs.map(([n, d]) => fieldBytes(11, valueInfo(n, d))), fieldBytes(12, valueInfo(...output)));
  return Uint8Array.from(concat(fieldInt(1, ir), fieldStr(2, 'fastattn-bench'), fieldBytes(7, graph),
    ...opsets.map(([d, v]) => fieldBytes(8, concat(d ? fieldStr(1, d) : [], fieldInt(2, v))))));
}

// The two ops on a shape s = {B, H, Hkv, Lq, Lk, D}, inputs BSHD as [B][L][heads*D].
function attentionModel(s, causal) {
  const attrs = [attrInt('q_num_heads', s.H), attrInt('kv_num_heads', s.Hkv)];
  if (causal) attrs.push(attrInt('is_causal', 1));
  return model({ op: 'Attention', domain: '', attrs, opsets: [['', 23]], ir: 11,
    inputs: [['Q', [s.B, s.Lq, s.H * s.D]], ['K', [s.B, s.Lk, s.Hkv * s.D]], ['V', [s.B, s.Lk, s.Hkv * s.D]]],
    output: ['Y', [s.B, s.Lq, s.H * s.D]] });
}
function mhaModel(s, causal) {
  const attrs = [attrInt('num_heads', s.H)];
  if (causal) attrs.push(attrInt('unidirectional', 1));
  return model({ op: 'MultiHeadAttention', domain: 'com.microsoft', attrs,
    opsets: [['', 21], ['com.microsoft', 1]], ir: 10,
    inputs: [['Q', [s.B, s.Lq, s.H * s.D]], ['K', [s.B, s.Lk, s.H * s.D]], ['V', [s.B, s.Lk, s.H * s.D]]],
    output: ['Y', [s.B, s.Lq, s.H * s.D]] });
}
const ops = [
  { name: 'Attention-23', build: attentionModel, takes: () => true },
  { name: 'MultiHeadAttention', build: mhaModel, takes: (s) => s.H === s.Hkv && s.Lq === s.Lk },
];

// float64 reference: causal is top-left (key j <= query i), as both ops
// define it without a past; the check uses Lq == Lk where it is causal.
function reference(s, causal, q, k, v) {
  const out = new Float64Array(s.B * s.Lq * s.H * s.D);
  const scale = 1 / Math.sqrt(s.D);
  for (let b = 0; b < s.B; b++) for (let h = 0; h < s.H; h++) {
    const g = Math.floor(h / (s.H / s.Hkv));
    for (let i = 0; i < s.Lq; i++) {
      const qo = ((b * s.Lq + i) * s.H + h) * s.D;
      const sc = [];
      for (let j = 0; j < s.Lk; j++) {
        if (causal && j > i) { sc.push(-Infinity); continue; }
        const ko = ((b * s.Lk + j) * s.Hkv + g) * s.D;
        let d = 0;
        for (let x = 0; x < s.D; x++) d += q[qo + x] * k[ko + x];
        sc.push(d * scale);
      }
      const m = Math.max(...sc);
      const w = sc.map((x) => Math.exp(x - m));
      const sum = w.reduce((a, x) => a + x, 0);
      for (let j = 0; j < s.Lk; j++) {
        const vo = ((b * s.Lk + j) * s.Hkv + g) * s.D;
        for (let x = 0; x < s.D; x++) out[qo + x] += (w[j] / sum) * v[vo + x];
      }
    }
  }
  return out;
}

function inputs(s) {
  let seed = 12345;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1;
  const fill = (n) => Float32Array.from({ length: n }, rnd);
  return {
    Q: new ort.Tensor('float32', fill(s.B * s.Lq * s.H * s.D), [s.B, s.Lq, s.H * s.D]),
    K: new ort.Tensor('float32', fill(s.B * s.Lk * s.Hkv * s.D), [s.B, s.Lk, s.Hkv * s.D]),
    V: new ort.Tensor('float32', fill(s.B * s.Lk * s.Hkv * s.D), [s.B, s.Lk, s.Hkv * s.D]),
  };
}
const session = (bytes, threads) => ort.InferenceSession.create(bytes, {
  executionProviders: ['cpu'], intraOpNumThreads: threads, interOpNumThreads: 1,
  executionMode: 'sequential', graphOptimizationLevel: 'all', logSeverityLevel: 3 });

async function check() {
  const shapes = [{ B: 2, H: 4, Hkv: 2, Lq: 7, Lk: 7, D: 8 }, { B: 1, H: 2, Hkv: 2, Lq: 9, Lk: 9, D: 16 },
    { B: 1, H: 4, Hkv: 1, Lq: 1, Lk: 13, D: 8 }];
  for (const s of shapes) for (const causal of [false, true]) for (const op of ops) {
    if (!op.takes(s)) continue;
    const feeds = inputs(s);
    const got = (await (await session(op.build(s, causal), 1)).run(feeds)).Y.data;
    const want = reference(s, causal, feeds.Q.data, feeds.K.data, feeds.V.data);
    let err = 0;
    for (let i = 0; i < want.length; i++) err = Math.max(err, Math.abs(got[i] - want[i]));
    if (!(err < 1e-5)) throw new Error(`${op.name} ${JSON.stringify(s)} causal=${causal}: max error ${err}`);
  }
}

// The bench's FLOPs: 2·(Dk+Dv) per (query, key) pair a row sees; causal is
// bottom-right there, which equals top-left for Lq == Lk.
function pairs(s, causal) {
  if (!causal) return s.Lq * s.Lk;
  let n = 0;
  for (let i = 0; i < s.Lq; i++) n += Math.min(s.Lk, i + 1 + s.Lk - s.Lq);
  return n;
}

async function time(s, causal, op, threads) {
  const sess = await session(op.build(s, causal), threads);
  const feeds = inputs(s);
  for (let i = 0; i < 3; i++) await sess.run(feeds);
  const t = [];
  const start = process.hrtime.bigint();
  while (t.length < 5 || (t.length < 50 && Number(process.hrtime.bigint() - start) < 2e9)) {
    const t0 = process.hrtime.bigint();
    await sess.run(feeds);
    t.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  t.sort((a, b) => a - b);
  const ms = t[Math.floor(t.length / 2)];
  const flops = 4 * s.B * s.H * s.D * pairs(s, causal);
  const row = { peer: 'onnxruntime', op: op.name, shape: `${s.B},${s.H},${s.Hkv},${s.Lq},${s.Lk},${s.D}`,
    causal, threads, median_ms: ms, gflops: flops / ms / 1e6, runs: t.length };
  if (s.Lq === 1) row.kv_gbps = (2 * 4 * s.B * s.Lk * s.Hkv * s.D) / ms / 1e6;
  return row;
}

async function main() {
  const arg = (name, def) => { const i = process.argv.indexOf(name); return i < 0 ? def : process.argv[i + 1]; };
  const threads = arg('--threads', '1,2').split(',').map(Number);
  const shapes = arg('--shape', '1,8,8,512,512,64;1,8,8,2048,2048,64;1,16,16,1024,1024,128;1,32,32,1,4096,128;1,32,8,1,8192,128')
    .split(';').map((x) => { const [B, H, Hkv, Lq, Lk, D] = x.split(',').map(Number); return { B, H, Hkv, Lq, Lk, D }; });
  const json = process.argv.includes('--json');
  await check();
  if (!json) console.log(`onnxruntime-node ${require('onnxruntime-node/package.json').version}: both ops agree with the float64 reference`);
  for (const s of shapes) for (const causal of s.Lq === 1 ? [false] : [false, true]) for (const t of threads) {
    for (const op of ops) {
      if (!op.takes(s)) continue;
      const r = await time(s, causal, op, t);
      if (json) { console.log(JSON.stringify(r)); continue; }
      console.log(`${r.shape.padEnd(22)} ${causal ? 'causal' : 'full  '} thr ${t}  ${op.name.padEnd(18)} ` +
        `${r.median_ms.toFixed(3).padStart(10)} ms ${r.gflops.toFixed(1).padStart(7)} GFLOP/s` +
        (r.kv_gbps ? ` ${r.kv_gbps.toFixed(1).padStart(6)} GB/s K+V` : ''));
    }
  }
}
main().catch((e) => { console.error(e.message || e); process.exit(1); });
