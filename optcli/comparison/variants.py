"""Variants for `optcli compare`: what each one changes in the compile config, and building it.

`--variants fp32,fp16,int8` names precisions; `--variant NAME:key=value,...` defines a variant of
its own, e.g. `nofuse:fuse.enabled=false` or `int8-dyn:precision=int8,quantize.flavour=dynamic`.
Keys are `precision`, `section.field` of any section of the compile config (optcli.config.SECTIONS:
export, simplify, fuse, bench, accuracy, quantize, cpu, tensorrt), or a bare field name as
`optcli.compile(**options)` takes it, all set by optcli.config.set_option. List fields take `a|b`.

Each variant builds in its own folder. Stage folders another variant already finished are linked in
first, so stages whose input and config are the same come back from the pipeline's cache (the
pipeline checks each one's key and sha256, so a linked folder that does not match is rebuilt).
"""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from optcli.config import PRECISIONS, SECTIONS, CompileConfig, UnknownOption, set_option
from optcli.errors import UsageError
from optcli.report import ErrorRecord

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")  # fullmatch: "$" would let "a\n" through


@dataclass
class Variant:
    name: str
    options: dict[str, str] = field(default_factory=dict)   # key -> value text, as given

    @property
    def precision(self) -> str:
        return self.options.get("precision", "fp32")


def parse_variants(names: list[str] | str, custom: list[str] | None = None) -> list[Variant]:
    """`--variants` names (precisions, or names defined by `--variant NAME:k=v,...`) in order."""
    defined: dict[str, Variant] = {}
    for text in custom or []:
        name, sep, rest = text.partition(":")
        if not sep or not _NAME.fullmatch(name):
            raise UsageError(f"malformed --variant {text!r}",
                             hint="write NAME:key=value,... e.g. nofuse:fuse.enabled=false")
        options: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise UsageError(f"--variant {name}: malformed option {part!r}", hint="write key=value")
            options[key.strip()] = value.strip()
        if options.get("precision", "fp32") not in PRECISIONS:
            raise UsageError(f"--variant {name}: unknown precision {options['precision']!r}",
                             hint=f"use one of: {', '.join(PRECISIONS)}")
        defined[name] = Variant(name, options)
    listed = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    listed += [n for n in defined if n not in listed]  # a defined variant is compared even if not listed
    if not listed:
        raise UsageError("no variants to compare", hint="e.g. --variants fp32,fp16,int8")
    if len(set(listed)) != len(listed):
        raise UsageError(f"variant listed twice in {','.join(listed)}")
    out = []
    for n in listed:
        if n in defined:
            out.append(defined[n])
        elif n in PRECISIONS:
            out.append(Variant(n, {"precision": n}))
        else:
            raise UsageError(f"unknown variant {n!r}",
                             hint=f"use a precision ({', '.join(PRECISIONS)}) "
                                  f"or define it with --variant {n}:key=value")
    return out


def apply_variant(config: CompileConfig, variant: Variant) -> None:
    """Set the variant's options on a compile config through set_option (precision, section.field, or a
    bare field name); text values take the field's type."""
    for key, value in variant.options.items():
        try:
            set_option(config, key, value, text=True, where=f"--variant {variant.name}: {key}")
        except UnknownOption:
            raise UsageError(f"--variant {variant.name}: unknown option {key!r}",
                             hint="use precision, or section.field with a section of: " + ", ".join(SECTIONS)) from None


def stage_folders(config: CompileConfig) -> list[str]:
    """The stage folder names the pipeline will use for this config (`02-simplify`, ...)."""
    from optcli.stages import all_stages

    return [f"{i:02d}-{cls.name}" for i, cls in enumerate((c for c in all_stages() if c.enabled(config)), 1)]


def seed_cache(done: Path, target: Path, wanted: list[str]) -> None:
    """Link another variant's finished stage folders named in `wanted` into `target` (the pipeline
    validates them before reuse)."""
    from optcli.run_lock import made_by_optcli, mark

    if not done.is_dir() or not made_by_optcli(target):
        return
    mark(target)  # the stage folders linked in are optcli's: the variant's run may write beside them
    for name in wanted:
        src, dst = done / name, target / name
        if not (src / "stage.json").is_file() or dst.exists():
            continue
        try:
            shutil.copytree(src, dst, copy_function=os.link)
        except OSError:  # another file system: copy instead
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)


@dataclass
class VariantBuild:
    """The outcome of building one variant."""

    variant: Variant
    out: Path
    report: Any = None                # RunReport
    error: ErrorRecord | None = None
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.status == "ok" and self.report.final is not None


class VariantBase(TypedDict):
    """What every variant of one compare shares: the compare's own flags."""
    inputs: list[Any] | None     # as optcli.compile(inputs=...) takes them
    target: str
    force: bool
    calib: Path | None
    eval: Path | None
    tolerance: dict[str, float]


def variant_config(model: str, variant: Variant, out: Path, base: VariantBase) -> CompileConfig:
    """The compile config of one variant, validated (so a bad variant fails before any build)."""
    config = CompileConfig(model=model, out=out, inputs=list(base["inputs"] or []), target=base["target"],
                           force=base["force"])
    set_option(config, "bench.enabled", False)  # compare measures every variant itself, in one interleaved run
    for key in ("cosine", "max_abs", "top1"):
        set_option(config, f"accuracy.{key}", base["tolerance"].get(key))
    for key, folder in (("calib", base["calib"]), ("eval", base["eval"])):
        if folder is not None:
            set_option(config, f"quantize.{key}", Path(folder))
    apply_variant(config, variant)
    try:
        config.validate()
    except UsageError as exc:
        raise UsageError(f"variant {variant.name}: {exc.message}", hint=exc.hint) from None
    return config


def build_variant(config: CompileConfig, variant: Variant, seed_from: Path | None,
                  on_event: Any = None) -> VariantBuild:
    """Compile one variant through the pipeline; failures are recorded, not raised."""
    from optcli.errors import OptcliError
    from optcli.pipeline import Pipeline  # the pipeline itself, not the API (no api <-> comparison cycle)

    out = config.out_dir()
    if seed_from is not None and not config.force:
        seed_cache(seed_from, out, stage_folders(config))
    t0 = time.perf_counter()
    build = VariantBuild(variant, out)
    try:
        build.report = Pipeline(config, on_event=on_event).run()
        if build.report.status != "ok":
            build.error = build.report.error or ErrorRecord(message=f"the build ended {build.report.status}")
    except OptcliError as exc:
        build.error = ErrorRecord(type=type(exc).__name__, message=exc.message, hint=exc.hint, exit_code=exc.exit_code)
    build.wall_seconds = round(time.perf_counter() - t0, 3)
    return build
