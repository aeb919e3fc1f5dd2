// schemas.mjs - apisim.py's schema validator: each object the simulator is
// about to store, checked against the Kubernetes OpenAPI schemas of its
// kind and version (kubernetes-models in tools/: types, formats, required
// fields, enums), as a real API server's decoding and validation would.
//
// usage: node schemas.mjs MODELS_DIR
// Reads one JSON object per line from stdin, {"apiVersion", "kind", ...},
// and answers each with one line:
//   {"covered": false}                      no schema for that kind here
//   {"errors": []}                          valid
//   {"errors": [{"path", "keyword", "params", "message"}]}  ajv's errors,
//       the path a JSON pointer into the object ("/spec/replicas")
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const models = process.argv[2];
if (!models) {
  console.error("usage: node schemas.mjs MODELS_DIR");
  process.exit(2);
}
const cache = new Map(); // "apiVersion kind" -> the model class, or null

async function model(apiVersion, kind) {
  const key = `${apiVersion} ${kind}`;
  if (!cache.has(key)) {
    const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
    let m = null;
    if (/^[A-Za-z0-9.]*$/.test(group) && /^v[0-9a-z]+$/.test(version) && /^[A-Z][A-Za-z0-9]*$/.test(kind)) {
      try {
        m = (await import(pathToFileURL(join(models, group, version, `${kind}.js`)).href))[kind] || null;
      } catch {
        m = null;
      }
    }
    cache.set(key, m);
  }
  return cache.get(key);
}

async function check(line) {
  let obj;
  try {
    obj = JSON.parse(line);
  } catch (e) {
    return { errors: [{ path: "", keyword: "json", params: {}, message: e.message }] };
  }
  const Model = obj && typeof obj.apiVersion === "string" && typeof obj.kind === "string" ? await model(obj.apiVersion, obj.kind) : null;
  if (!Model)
    return { covered: false };
  try {
    new Model(obj).validate();
    return { errors: [] };
  } catch (e) {
    if (!Array.isArray(e.errors))
      return { errors: [{ path: "", keyword: "exception", params: {}, message: String(e.message) }] };
    return { errors: e.errors.map((x) => ({ path: x.instancePath, keyword: x.keyword, params: x.params, message: x.message })) };
  }
}

// one answer per line, in order
let chain = Promise.resolve();
createInterface({ input: process.stdin }).on("line", (line) => {
  chain = chain.then(async () => process.stdout.write(JSON.stringify(await check(line)) + "\n"));
});
