#!/usr/bin/env python3
# bloomery: writes the IQ quant fixture (test/fixtures/iq-quants.json) from the `gguf` Python
# package, an implementation independent of bloomery's C: for each grid type (IQ2_XXS, IQ2_XS,
# IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) random raw blocks with a finite f16 scale and the gguf
# package's dequantization of them (little-endian float32), and the package's codebooks (the
# grid points it decodes, one byte per element, signed for IQ1) and IQ2_XXS's sign table.
# test/quants-iq.test.ts reads it.
#
# Usage: python3 scripts/make-iq-fixtures.py [OUT_FILE] [--gguf-py DIR]
#   OUT_FILE defaults to $OUT/iq-quants.json when OUT is set, else test/fixtures/iq-quants.json;
#   --gguf-py DIR imports the package from a source tree (llama.cpp's gguf-py) instead of the
#   installed one. Needs numpy. Deterministic (seed 28).
import base64
import json
import os
import sys


def installed_version() -> str:
    from importlib.metadata import version

    return version("gguf")


def main() -> None:
    args = sys.argv[1:]
    version = None
    if "--gguf-py" in args:
        i = args.index("--gguf-py")
        src = args[i + 1]
        sys.path.insert(0, src)
        del args[i : i + 2]
        with open(os.path.join(src, "pyproject.toml")) as f:
            version = next((l.split('"')[1] for l in f if l.startswith("version")), "?") + " (source tree)"
    import numpy as np
    import gguf
    from gguf import quants as Q
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as G

    here = os.path.dirname(os.path.abspath(__file__))
    out = args[0] if args else (os.path.join(os.environ["OUT"], "iq-quants.json") if os.environ.get("OUT") else os.path.join(here, "..", "test", "fixtures", "iq-quants.json"))
    rng = np.random.default_rng(28)
    n_blocks = 8
    types = {}
    for name in ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]:
        t = G[name]
        be, bb = GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, size=(n_blocks, bb), dtype=np.uint8)
        # the f16 block scale: a random positive or negative value of 1e-3 .. 3e-2
        d = (rng.uniform(1e-3, 3e-2, size=n_blocks) * rng.choice([-1.0, 1.0], size=n_blocks)).astype(np.float16)
        bits = d.view(np.uint16)
        if name == "IQ1_M":
            # IQ1_M keeps d in the top nibbles of its four 16-bit scale words (bytes 48..55)
            sc = raw[:, 48:56].copy().view(np.uint16)
            sc &= np.uint16(0x0FFF)
            for k in range(4):
                sc[:, k] |= ((bits >> np.uint16(4 * k)) & np.uint16(15)) << np.uint16(12)
            raw[:, 48:56] = sc.view(np.uint8)
        else:
            raw[:, 0:2] = bits.reshape(-1, 1).view(np.uint8)
        y = Q.dequantize(raw.reshape(-1), t).astype("<f4")
        assert y.size == n_blocks * be and np.all(np.isfinite(y)), name
        cls = getattr(Q, name)
        cls.init_grid()
        grid = np.asarray(cls.grid).reshape(cls.grid_shape)
        entry = {
            "ggml_type": int(t),
            "block_elems": be,
            "block_bytes": bb,
            "blocks": n_blocks,
            "raw_b64": base64.b64encode(raw.tobytes()).decode(),
            "f32_le_b64": base64.b64encode(y.tobytes()).decode(),
            "grid_points": int(grid.shape[0]),
            "grid_elems": int(grid.shape[1]),
            "grid_i8_b64": base64.b64encode(grid.astype(np.int8).tobytes()).decode(),
        }
        types[name] = entry
    doc = {
        "about": "random IQ blocks and the gguf package's dequantization of them (little-endian float32), "
        "with the package's codebooks (int8 per element) and IQ2_XXS's 7-bit sign table (scripts/make-iq-fixtures.py)",
        "gguf_version": version or installed_version(),
        "ksigns_b64": base64.b64encode(bytes(Q.IQ2_XXS.ksigns)).decode(),
        "types": types,
    }
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"make-iq-fixtures: wrote {out} ({', '.join(types)})")


if __name__ == "__main__":
    main()
