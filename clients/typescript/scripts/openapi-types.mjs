#!/usr/bin/env node
// Generates src/openapi.ts, the client's wire types, from the server's
// OpenAPI document (leasehttp/openapi.json):
//
//	node scripts/openapi-types.mjs           write src/openapi.ts
//	node scripts/openapi-types.mjs --check   fail if src/openapi.ts is not what the document gives
//
// It knows the subset of JSON Schema the document uses and refuses any other
// keyword that would change a type, so a document that grows past it fails
// here rather than yielding types that say less than the document.

import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const docPath = join(here, "..", "..", "..", "leasehttp", "openapi.json");
const outPath = join(here, "..", "src", "openapi.ts");

// Keywords that constrain values but not their TypeScript type.
const annotations = new Set([
  "description", "title", "minimum", "maximum", "minLength", "maxLength", "pattern", "format",
]);

function fail(msg) {
  throw new Error(`openapi-types: ${msg}`);
}

function refName(ref, at) {
  const m = /^#\/components\/schemas\/([A-Za-z][A-Za-z0-9]*)$/.exec(ref);
  if (!m) fail(`${at}: unsupported $ref ${ref}`);
  return m[1];
}

function comment(text, indent) {
  if (!text) return "";
  const lines = text.replace(/\*\//g, "*\\/").split("\n");
  return `${indent}/**\n${lines.map((l) => `${indent} * ${l}`.trimEnd()).join("\n")}\n${indent} */\n`;
}

// type returns the TypeScript type of schema s, found at path at.
function type(s, at, indent) {
  if (s === false) return "never";
  if (s === true) return "unknown";
  if (typeof s !== "object" || s === null) fail(`${at}: not a schema`);
  for (const k of Object.keys(s)) {
    if (!annotations.has(k) && !["$ref", "type", "enum", "properties", "required", "additionalProperties",
      "maxProperties", "items", "minItems", "maxItems", "allOf", "oneOf"].includes(k)) {
      fail(`${at}: unsupported keyword ${k}`);
    }
  }
  if (s.$ref !== undefined) {
    if (Object.keys(s).some((k) => k !== "$ref" && !annotations.has(k))) fail(`${at}: keywords beside $ref`);
    return refName(s.$ref, at);
  }
  if (s.allOf !== undefined) {
    const rest = { ...s };
    delete rest.allOf;
    const parts = s.allOf.map((p, i) => type(p, `${at}/allOf/${i}`, indent));
    if (Object.keys(rest).some((k) => !annotations.has(k))) parts.push(type(rest, at, indent));
    return parts.join(" & ");
  }
  if (s.oneOf !== undefined) {
    if (Object.keys(s).some((k) => k !== "oneOf" && !annotations.has(k))) fail(`${at}: keywords beside oneOf`);
    return s.oneOf.map((p, i) => `(${type(p, `${at}/oneOf/${i}`, indent)})`).join(" | ");
  }
  if (s.enum !== undefined) {
    if (!Array.isArray(s.enum) || s.enum.some((v) => typeof v !== "string")) fail(`${at}: only string enums`);
    return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  }
  switch (s.type) {
    case "integer":
    case "number":
      return "number";
    case "string":
      return "string";
    case "boolean":
      return "boolean";
    case "array":
      if (s.items === undefined) fail(`${at}: array without items`);
      return `Array<${type(s.items, `${at}/items`, indent)}>`;
    case "object":
    case undefined: {
      if (s.type === undefined && s.properties === undefined) fail(`${at}: schema without type`);
      if (s.additionalProperties !== undefined && s.additionalProperties !== false) {
        fail(`${at}: additionalProperties other than false`);
      }
      const props = s.properties ?? {};
      const names = Object.keys(props);
      if (names.length === 0) {
        return s.maxProperties === 0 || s.additionalProperties === false ? "Record<string, never>" : "Record<string, unknown>";
      }
      if (s.maxProperties !== undefined) fail(`${at}: maxProperties with properties`);
      const required = new Set(s.required ?? []);
      for (const r of required) if (!(r in props)) fail(`${at}: required ${r} is not a property`);
      const inner = indent + "  ";
      const members = names.map((n) => {
        const p = props[n];
        const opt = required.has(n) ? "" : "?";
        const doc = typeof p === "object" && p !== null ? comment(p.description, inner) : "";
        return `${doc}${inner}${n}${opt}: ${type(p, `${at}/properties/${n}`, inner)};`;
      });
      return `{\n${members.join("\n")}\n${indent}}`;
    }
    default:
      fail(`${at}: unsupported type ${JSON.stringify(s.type)}`);
  }
}

// resolve returns the object a component $ref points to.
function resolve(doc, obj, at) {
  if (obj.$ref === undefined) return obj;
  const m = /^#\/components\/(responses|parameters|headers)\/([A-Za-z0-9]+)$/.exec(obj.$ref);
  if (!m) fail(`${at}: unsupported $ref ${obj.$ref}`);
  const target = doc.components?.[m[1]]?.[m[2]];
  if (!target) fail(`${at}: $ref ${obj.$ref} not found`);
  return target;
}

function bodyType(doc, content, at, indent) {
  const json = content?.["application/json"];
  if (!json) return content && Object.keys(content).length > 0 ? "string" : "undefined";
  return type(json.schema, `${at}/content/application~1json/schema`, indent);
}

export function generate(doc) {
  if (!/^3\.1\./.test(doc.openapi ?? "")) fail(`the document is OpenAPI ${doc.openapi}, want 3.1`);
  let out = `// Code generated by scripts/openapi-types.mjs from leasehttp/openapi.json. DO NOT EDIT.\n` +
    `// The wire types of the lease HTTP API, version ${doc.info.version}.\n`;
  for (const [name, s] of Object.entries(doc.components?.schemas ?? {})) {
    const at = `#/components/schemas/${name}`;
    out += "\n" + comment(s.description, "");
    if (s.enum !== undefined && s.type === "string") {
      out += `export const ${name}Values = [${s.enum.map((v) => JSON.stringify(v)).join(", ")}] as const;\n`;
      out += `export type ${name} = (typeof ${name}Values)[number];\n`;
    } else {
      out += `export type ${name} = ${type(s, at, "")};\n`;
    }
  }

  const ops = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const method of ["get", "post", "put", "delete", "patch"]) {
      const op = item[method];
      if (!op) continue;
      if (!op.operationId) fail(`${method} ${path}: no operationId`);
      const at = `#/paths/${path.replace(/\//g, "~1")}/${method}`;
      const params = [...(item.parameters ?? []), ...(op.parameters ?? [])].map((p, i) => resolve(doc, p, `${at}/parameters/${i}`));
      const responses = Object.entries(op.responses ?? {}).map(([status, r]) => {
        if (!/^[1-5][0-9][0-9]$/.test(status)) fail(`${at}: response ${status} is not a status`);
        const res = resolve(doc, r, `${at}/responses/${status}`);
        return `      ${status}: ${bodyType(doc, res.content, `${at}/responses/${status}`, "      ")};`;
      });
      const request = op.requestBody ? bodyType(doc, resolve(doc, op.requestBody, at).content, `${at}/requestBody`, "    ") : "undefined";
      ops.push({
        id: op.operationId, method: method.toUpperCase(), path,
        pathParams: params.filter((p) => p.in === "path").map((p) => p.name),
        query: params.filter((p) => p.in === "query").map((p) => p.name),
        request, responses,
      });
    }
  }
  out += `\n/** The API's operations by operationId: method, path template and parameters. */\n`;
  out += `export const operations = {\n`;
  for (const o of ops) {
    out += `  ${o.id}: { method: ${JSON.stringify(o.method)}, path: ${JSON.stringify(o.path)}, ` +
      `pathParams: ${JSON.stringify(o.pathParams)}, query: ${JSON.stringify(o.query)} },\n`;
  }
  out += `} as const;\n`;
  out += `\n/** Each operation's request body and answers by status. */\nexport interface Operations {\n`;
  for (const o of ops) {
    out += `  ${o.id}: {\n    request: ${o.request};\n    responses: {\n${o.responses.join("\n")}\n    };\n  };\n`;
  }
  out += `}\n`;
  return out;
}

function main(args) {
  const doc = JSON.parse(readFileSync(docPath, "utf8"));
  const text = generate(doc);
  if (args.includes("--check")) {
    let have = "";
    try {
      have = readFileSync(outPath, "utf8");
    } catch {
      // missing: differs
    }
    if (have !== text) {
      console.error("openapi-types: src/openapi.ts is not what leasehttp/openapi.json gives; run npm run gen:openapi");
      process.exit(1);
    }
    return;
  }
  writeFileSync(outPath, text);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
