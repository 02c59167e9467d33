// ffi/layout.ts against ffi/bloomery.h: every parameter struct's fields (names, order, int or float),
// the op kinds and each kind's tensor roles, read from the header's text, so a field added to one and
// not the other fails here rather than as a wrong number in a kernel.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CPU_OPTION_FIELDS, CUDA_OPTION_FIELDS, OP_PARAMS, OP_ROLES, OpKind, PARAM_FIELDS, type FieldKind } from "../ffi/layout.ts";
import { ROOT } from "./paths.ts";

const header = readFileSync(join(ROOT, "ffi", "bloomery.h"), "utf8").replace(/\/\*[\s\S]*?\*\//g, "");

/** The fields of `typedef struct NAME { ... } NAME;` in order, nested structs flattened with their field's prefix. */
function structFields(name: string, prefix = ""): [string, FieldKind][] {
  const m = header.match(new RegExp(`typedef struct ${name} \\{([\\s\\S]*?)\\} ${name};`));
  if (!m) throw new Error(`no struct ${name} in bloomery.h`);
  const out: [string, FieldKind][] = [];
  for (const decl of m[1].split(";").map((d) => d.trim()).filter(Boolean)) {
    const [type, ...names] = decl.split(/[\s,]+/).filter(Boolean);
    for (const n of names) {
      if (type.startsWith("bl_") && type.endsWith("_params")) out.push(...structFields(type, `${prefix}${n}_`));
      else if (type === "double") out.push([`${prefix}${n}`, "f"]);
      else if (type === "int64_t" || type === "uint64_t") out.push([`${prefix}${n}`, "i"]);
      else throw new Error(`${name}.${n}: type ${type} is not an 8-byte slot`);
    }
  }
  return out;
}

/** The enumerators of the enum that holds `first`, in order (values as written). */
function enumNames(first: string): string[] {
  const m = header.match(new RegExp(`enum[^{]*\\{([^}]*\\b${first}\\b[^}]*)\\}`));
  if (!m) throw new Error(`no enum with ${first}`);
  return m[1].split(",").map((e) => e.trim().split(/\s*=\s*/)[0]).filter(Boolean);
}

describe("ffi/layout.ts matches ffi/bloomery.h", () => {
  for (const [s, fields] of Object.entries(PARAM_FIELDS)) {
    test(`bl_${s}_params`, () => {
      expect(structFields(`bl_${s}_params`)).toEqual(fields.map(([n, k]) => [n, k]));
    });
  }

  test("bl_cuda_options", () => {
    expect(structFields("bl_cuda_options")).toEqual(CUDA_OPTION_FIELDS.map(([n, k]) => [n, k]));
  });

  test("bl_cpu_options", () => {
    expect(structFields("bl_cpu_options")).toEqual(CPU_OPTION_FIELDS.map(([n, k]) => [n, k]));
  });

  test("the op kinds", () => {
    const kinds = enumNames("BL_OP_EMBED").map((e) => e.replace(/^BL_OP_/, ""));
    const ours = Object.keys(OpKind).filter((k) => Number.isNaN(Number(k))).map((k) => k.toUpperCase());
    expect(kinds).toEqual(["EMBED", "NORM", "ATTN", "ROUTER", "EXPERTS", "FFN", "OUTPUT", "MLA", "DELTANET", "MTP_IN"]);
    expect(ours).toEqual(kinds);
    for (const k of kinds) expect(header).toMatch(new RegExp(`BL_OP_${k} = ${OpKind[k.charAt(0) + k.slice(1).toLowerCase() as keyof typeof OpKind]}\\b`));
  });

  test("each kind's tensor roles, in role order, and its parameter struct", () => {
    const roleEnum: Record<number, string> = {
      [OpKind.Embed]: "BL_EMBED_TOKENS", [OpKind.Norm]: "BL_NORM_WEIGHT", [OpKind.Attn]: "BL_ATTN_Q", [OpKind.Router]: "BL_ROUTER_W",
      [OpKind.Experts]: "BL_EXPERTS_GATE", [OpKind.Ffn]: "BL_FFN_GATE", [OpKind.Output]: "BL_OUTPUT_NORM", [OpKind.Mla]: "BL_MLA_Q",
      [OpKind.Deltanet]: "BL_DN_QKV", [OpKind.Mtp_in]: "BL_MTP_EMBED",
    };
    for (const [kind, first] of Object.entries(roleEnum)) {
      const names = enumNames(first);
      const prefix = first.replace(/[A-Z]+$/, "");
      expect(names[names.length - 1]).toBe(`${prefix}TENSORS`);
      const roles = names.slice(0, -1).map((n) => n.slice(prefix.length).toLowerCase());
      expect(roles).toEqual([...OP_ROLES[Number(kind) as OpKind]]);
    }
    const maxRoles = Math.max(...Object.values(OP_ROLES).map((r) => r.length));
    expect(header).toMatch(new RegExp(`#define BL_OP_MAX_TENSORS ${maxRoles}\\b`));
    expect(OP_PARAMS[OpKind.Embed]).toBeUndefined();
  });
});
