// Writes ecmascript-numbers.txt: doubles with the text ECMAScript's
// Number::toString gives them, the form RFC 8785 requires for numbers.
// The Python client's formatter is tested against the file; regenerate it
// (deterministic: a fixed seed) with
//
//   node clients/testdata/ecmascript-numbers.mjs > clients/testdata/ecmascript-numbers.txt
//
// Each line is the IEEE 754 bits as 16 hex digits, a space, String(x).
const view = new DataView(new ArrayBuffer(8));
const bitsOf = (x) => { view.setFloat64(0, x); return view.getBigUint64(0).toString(16).padStart(16, '0'); };
const fromBits = (b) => { view.setBigUint64(0, BigInt.asUintN(64, b)); return view.getFloat64(0); };

let state = 0x9e3779b97f4a7c15n; // xorshift64*
const next = () => {
  state ^= state >> 12n; state ^= (state << 25n) & 0xffffffffffffffffn; state ^= state >> 27n;
  return (state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn;
};
const below = (n) => Number(next() % BigInt(n));

const values = [];
const add = (x) => { if (Number.isFinite(x)) values.push(x); };
const neighbours = (x) => {
  view.setFloat64(0, x);
  const b = view.getBigUint64(0);
  add(x); add(fromBits(b + 1n)); if (b > 0n) add(fromBits(b - 1n));
};

// The forms where printers disagree, and the boundaries of each layout.
for (const x of [0, -0, 1, -1, 0.1, 0.2, 0.3, 0.1 + 0.2, 1 / 3, 2 / 3, 0.5, 1.5, 4.35, 21.5, 100, 123.456, -987.654e-10,
  1e21, 1e20, 123456789012345680000, 1e-6, 1e-7, 5e-7, 1.5e-7, 2.5e-7, 1e-5, 0.000001, 0.0000015, 1e16, 1e15 + 0.3,
  9007199254740991, 9007199254740992, 9007199254740994, 2 ** 63, 2 ** 64, Number.MAX_VALUE, Number.MIN_VALUE,
  Number.EPSILON, 2.2250738585072014e-308, 2.225073858507201e-308, 1e300, 1e-300, 1e308, 5e-324, 1e23, 8.41e21,
  5.5e-7, 123e-20, 1.7976931348623157e308, 4.9406564584124654e-324, 0.001, 0.0001, 1234567.891, 3.14159,
  2.718281828459045, 1.0000000000000002, 0.9999999999999999, 1e-323, 299792458, 6.02214076e23, 6.62607015e-34]) {
  add(x); add(-x);
}
for (let e = -30; e <= 30; e++) { neighbours(Number(`1e${e}`)); neighbours(Number(`5e${e}`)); neighbours(Number(`9.5e${e}`)); }
for (let e = -1074; e <= 1023; e += 7) neighbours(2 ** e);
// Short decimals at every scale: what tools actually send.
for (let i = 0; i < 3000; i++) {
  const digits = 1 + below(17);
  let m = '';
  for (let d = 0; d < digits; d++) m += String(d === 0 ? 1 + below(9) : below(10));
  add((below(2) ? -1 : 1) * Number(`${m}e${below(80) - 45}`));
}
// Any double at all.
for (let i = 0; i < 3000; i++) add(fromBits(next()));

console.log('# IEEE 754 bits (hex) and String(x) from Node ' + process.version + '; made by ecmascript-numbers.mjs');
const seen = new Set();
for (const x of values) {
  const b = bitsOf(x);
  if (seen.has(b)) continue;
  seen.add(b);
  console.log(`${b} ${String(x)}`);
}
