"""Lay out a Triton model repository entry: `<repo>/<name>/config.pbtxt`, `<repo>/<name>/<version>/<model
file>` and a README.md with the commands to serve and measure it.

Safety rules: the model name is sanitised to what works as a folder and in Triton's URLs
(`/v2/models/<name>`); a name with a path separator, or a folder that resolves outside `--repo`
(a symlink), is refused; an existing version is only replaced with `force`; versions of a different
model under the same name (config.pbtxt, shared by all versions, would no longer match them) are only
removed with `replace`; every file and the version folder are written atomically, so an interrupted
export never leaves a half-written model that Triton would try to load.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from optcli.atomic_write import atomic_dir, remove_stale_partials, write_text_atomic
from optcli.deploy.pbtxt import parse, render
from optcli.deploy.triton_backend import piece_of
from optcli.deploy.triton_config import ResolvedConfig, TritonOptions, build_config
from optcli.deploy.triton_python import python_backend_model
from optcli.deploy.triton_readme import readme_text
from optcli.deploy.triton_source import BACKEND_PYTHON, resolve_source
from optcli.errors import UsageError
from optcli.version import __version__

MAX_NAME_LENGTH = 128


@dataclass
class TritonExport:
    """What export_triton wrote and decided."""

    name: str
    version: int
    repo: Path
    model_dir: Path
    config_path: Path
    model_path: Path
    readme_path: Path
    platform: str
    max_batch_size: int
    kind: str
    instances: int
    replaced: bool
    config_text: str
    notes: list[str] = field(default_factory=list)
    # Per input, concrete dims (without the batch when batching) where known: client examples.
    example_dims: dict[str, tuple[int, ...]] = field(default_factory=dict)
    tensors: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # input/output: (name, TYPE_*)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "version": self.version, "repo": str(self.repo), "model_dir": str(self.model_dir),
                "config": str(self.config_path), "model": str(self.model_path), "readme": str(self.readme_path),
                "platform": self.platform, "max_batch_size": self.max_batch_size, "kind": self.kind,
                "instances": self.instances, "replaced": self.replaced, "notes": self.notes}


def sanitize_model_name(name: str) -> str:
    """A Triton model name from any text: runs of other characters become one `_`, no leading or trailing
    `._-`; a name with a path separator is refused rather than rewritten (it was meant as a path)."""
    if "/" in name or "\\" in name or name in (".", ".."):
        raise UsageError(f"model name {name!r} contains a path separator; it must be a plain folder name",
                         hint="pass --name resnet50 (the repository folder comes from --repo)")
    clean = re.sub(r"[^A-Za-z0-9_.\-]+", "_", name).strip("._-")[:MAX_NAME_LENGTH]
    if not clean.strip("_"):
        raise UsageError(f"model name {name!r} has no usable characters", hint="pass --name with letters or digits")
    return clean


def existing_versions(model_dir: Path) -> list[int]:
    """Version folders Triton would load: numeric names not starting with 0."""
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir()
                  if p.is_dir() and p.name.isdigit() and not p.name.startswith("0"))


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _check_repo(repo: Path) -> None:
    if repo.exists() and not repo.is_dir():
        raise UsageError(f"--repo {repo} is a file", hint="pass a folder (created if missing)")
    try:
        repo.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --repo {repo}: {exc.strerror or exc}", hint="pass a folder you can write to") \
            from None


def _python_target(options: TritonOptions) -> bool:
    if options.backend not in (None, BACKEND_PYTHON):
        raise UsageError(f"unknown Triton backend {options.backend!r}",
                         hint="use --backend python, or leave it out for the artifact's own backend")
    return options.backend == BACKEND_PYTHON


def _first(fields: dict[str, list[Any]], key: str, default: Any = None) -> Any:
    values = fields.get(key) or [default]
    return values[0]


# A tensor as the served signature compares it: name, data type, full shape.
SignedTensor = tuple[str, str, tuple[int, ...]]


class Signature(TypedDict):
    """What a model version must match to be served by a config (served_signature)."""
    platform: str | None          # or the backend, for OpenVINO
    input: list[SignedTensor]
    output: list[SignedTensor]


def served_signature(config_text: str) -> Signature:
    """What a model version must match to be served by a config: its platform (or backend) and each
    tensor's name, data type and full shape (the batch dim included where the config batches, so a
    change of max_batch_size alone keeps the same signature). ValueError if the text is not a config."""
    cfg = parse(config_text)
    batch = [-1] if int(_first(cfg, "max_batch_size", 0) or 0) > 0 else []
    tensors: dict[str, list[SignedTensor]] = {}
    for kind in ("input", "output"):
        entries = []
        for t in cfg.get(kind, []):
            if not isinstance(t, dict):
                raise ValueError(f"{kind} is not a message")
            entries.append((str(_first(t, "name", "")), str(_first(t, "data_type", "TYPE_INVALID")),
                            tuple(batch + [int(d) for d in t.get("dims", [])])))
        tensors[kind] = sorted(entries)
    return Signature(platform=_first(cfg, "platform") or _first(cfg, "backend"), input=tensors["input"],
                     output=tensors["output"])


def _signature_change(old: Signature, new: Signature) -> str:
    """What differs between two signatures, in words (the first difference)."""
    if old["platform"] != new["platform"]:
        return f"its platform is {old['platform']}, this one's {new['platform']}"
    for kind, was, now in (("input", old["input"], new["input"]), ("output", old["output"], new["output"])):
        if was != now:
            def text(entries: list[SignedTensor]) -> str:
                return ", ".join(f"{n} {t.removeprefix('TYPE_')} {list(d)}" for n, t, d in entries)
            return f"its {kind}s are {text(was)}, this one's {text(now)}"
    return "they are the same"


def _other_model(model_dir: Path, keep: list[int], config_text: str) -> str | None:
    """Why the versions `keep` (already in model_dir) cannot share a config with `config_text`, or None."""
    if not keep:
        return None
    existing = model_dir / "config.pbtxt"
    if not existing.is_file():
        return "it has no config.pbtxt to compare with"
    try:
        old = served_signature(existing.read_text(encoding="utf-8", errors="replace")[:1_000_000])
    except (ValueError, TypeError, OverflowError) as exc:
        return f"its config.pbtxt cannot be read ({exc})"
    new = served_signature(config_text)
    return None if old == new else _signature_change(old, new)


def export_triton(source: str | Path, repo: str | Path, options: TritonOptions | None = None, *,
                  name: str | None = None, version: int | None = None, force: bool = False,
                  replace: bool = False, command: str = "optcli export-triton") -> TritonExport:
    """Write a ready Triton model repository entry for `source` (report.json, .onnx, OpenVINO .xml, .engine);
    with `options.backend == "python"`, for Triton's Python backend running optcli's runner.

    config.pbtxt is shared by every version of a model: when versions already there are of a different
    model (another platform, or other tensor names, types or shapes), the export is refused unless
    `replace`, which removes them once the new version is in place."""
    options = options or TritonOptions()
    python = _python_target(options)
    if not python and options.padding != "auto":
        raise UsageError(f"padding {options.padding!r} applies to the Python backend (optcli's runner merges "
                         "requests of different lengths there)", hint="add --backend python, or leave padding out")
    model = (python_backend_model(source, threads=options.intra_op_threads, command=command,
                                  max_request_bytes=options.max_request_bytes, padding=options.padding) if python
             else resolve_source(source))
    repo = Path(repo)
    model_name = sanitize_model_name(name if name else model.default_name)
    notes: list[str] = []
    if name and model_name != name:
        notes.append(f"model name {name!r} sanitised to {model_name!r}")
    header = (f"Written by optcli {__version__} ({command}) from {source}.\n"
              "Checked against Triton's ModelConfig protobuf (model_config.proto) in optcli's tests.")
    resolved: ResolvedConfig = build_config(model, options, model_name, header=header)
    notes += resolved.notes
    config_text = render(resolved.tree)

    _check_repo(repo)
    model_dir = repo / model_name
    if model_dir.is_symlink() or (model_dir.exists() and not _inside(model_dir, repo)):
        raise UsageError(f"{model_dir} resolves outside --repo {repo}", hint="remove the link or pick another --name")
    if model_dir.exists() and not model_dir.is_dir():
        raise UsageError(f"{model_dir} is a file", hint="remove it or pick another --name")
    versions = existing_versions(model_dir)
    if version is None:
        version = (versions[-1] + 1) if versions else 1
    if version < 1:
        raise UsageError(f"--version {version}: Triton versions are positive integers", hint="use --version 1 or more")
    version_dir = model_dir / str(version)
    replaced = version_dir.exists()
    if replaced and not force:
        raise UsageError(f"{version_dir} already exists", hint=f"pass --force to replace it, or --version "
                         f"{(versions[-1] + 1) if versions else version + 1}")
    if version_dir.is_symlink() or (replaced and not _inside(version_dir, repo)):
        raise UsageError(f"{version_dir} resolves outside --repo {repo}", hint="remove the link first")
    others = [v for v in versions if v != version]
    conflict = _other_model(model_dir, others, config_text)
    if conflict and not replace:
        listed = ", ".join(str(v) for v in others)
        raise UsageError(f"{model_dir} holds version(s) {listed} of a different model: {conflict}; config.pbtxt is "
                         "shared by all versions, so writing this one's would leave them unservable",
                         hint="pass --replace to remove those versions and serve this model instead, or pick "
                              "another --name")
    if conflict:
        notes.append(f"replaced the model: removed version(s) {', '.join(str(v) for v in others)} ({conflict})")
    elif versions and version < versions[-1]:
        notes.append(f"version {version} is older than version {versions[-1]}: Triton serves the newest version by "
                     "default, and config.pbtxt (shared by all versions) now describes this one")

    model_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(model_dir)
    with atomic_dir(version_dir) as tmp:
        copied = piece_of(model).copy(model, tmp)
    model_path = version_dir / copied.name
    config_path = model_dir / "config.pbtxt"
    write_text_atomic(config_path, config_text)
    readme_path = model_dir / "README.md"
    write_text_atomic(readme_path, readme_text(model, resolved, model_name, version, repo, options, notes))
    if conflict:  # after the new version and its config are in place: the folder is never without a model
        for old in others:
            old_dir = model_dir / str(old)
            if old_dir.is_dir() and not old_dir.is_symlink() and _inside(old_dir, repo):
                shutil.rmtree(old_dir)
    return TritonExport(name=model_name, version=version, repo=repo, model_dir=model_dir, config_path=config_path,
                        model_path=model_path, readme_path=readme_path, platform=model.platform,
                        max_batch_size=resolved.max_batch_size, kind=resolved.kind, instances=options.instances,
                        replaced=replaced, config_text=config_text, notes=notes,
                        example_dims={t["name"]: tuple(resolved.perf_shapes.get(t["name"], t["dims"]))
                                      for t in resolved.tensors["input"]},
                        tensors={k: [(t["name"], str(t["data_type"])) for t in resolved.tensors[k]]
                                 for k in ("input", "output")})
