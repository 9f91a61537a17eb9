"""`throughput-schema`: export JSON Schema for every record, validate a file, convert a
Hugging Face config.json into a recipe, or upgrade a campaign to this schema version.

throughput-schema export --output schemas/
throughput-schema validate worker-result runs/throughput-point.json
throughput-schema recipe-from-hf path/to/SmolLM2-135M/config.json --output configs/mine.yaml
throughput-schema upgrade runs/my-campaign
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from throughput_schema.argparsing import OneLineParser, command_line
from throughput_schema.codec import SchemaError, dumps, read, write_atomic
from throughput_schema.hf_config import HfConfigError, import_config, recipe_yaml
from throughput_schema.layout import MANIFEST
from throughput_schema.recipe import RecipeError, parameter_count, recipe_from_dict
from throughput_schema.records import RECORD_TYPES
from throughput_schema.upgrade import UpgradeRefused, campaigns, upgrade
from throughput_schema.version import SCHEMA_VERSION


def json_schemas() -> dict[str, dict]:
    """One self-contained JSON Schema document per record kind."""
    return {name: msgspec.json.schema(type_) for name, type_ in RECORD_TYPES.items()}


@command_line
def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="throughput-schema", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    export = sub.add_parser("export", help="write <kind>.schema.json for every record")
    export.add_argument("--output", type=Path, help="folder to write into (default: print one document)")
    validate = sub.add_parser("validate", help="decode a file as a record kind; exit 1 if it is malformed")
    validate.add_argument("kind", choices=sorted(RECORD_TYPES))
    validate.add_argument("file", type=Path)
    hf = sub.add_parser("recipe-from-hf", help="write the recipe of a Hugging Face model's config.json")
    hf.add_argument("config", type=Path, metavar="CONFIG_JSON")
    hf.add_argument("--name", help="the model's name in curves and outputs (default: the folder holding the file)")
    hf.add_argument("--output", type=Path, help="YAML file to write (default: print it)")
    up = sub.add_parser("upgrade", help="rewrite a campaign of the previous schema version in this one, once")
    up.add_argument("folder", type=Path, metavar="DIR", help="a campaign, or a folder of campaigns")
    args = parser.parse_args(argv)

    if args.command == "upgrade":
        return upgrade_campaigns(args.folder)
    if args.command == "recipe-from-hf":
        return recipe_from_hf(args.config, name=args.name, output=args.output)

    if args.command == "export":
        schemas = json_schemas()
        if args.output is None:
            sys.stdout.buffer.write(dumps(schemas))
            return 0
        if args.output.exists() and not args.output.is_dir():
            print(
                f"throughput-schema: {args.output} exists and is not a folder; choose another --output", file=sys.stderr
            )
            return 2
        for name, schema in schemas.items():
            write_atomic(args.output / f"{name}.schema.json", dumps(schema))
        print(f"wrote {len(schemas)} schemas to {args.output}")
        return 0
    try:
        read(args.file, RECORD_TYPES[args.kind])
    except SchemaError as exc:
        print(f"throughput-schema: {exc}", file=sys.stderr)
        return 1
    print(f"{args.file}: valid {args.kind}")
    return 0


def upgrade_campaigns(folder: Path) -> int:
    try:
        found = campaigns(folder)
    except UpgradeRefused as exc:
        print(f"throughput-schema: {exc}", file=sys.stderr)
        return 2
    if not found:
        print(
            f"throughput-schema: {folder} holds no {MANIFEST}, nor do the folders in it: "
            "give a campaign folder (the one `throughput-sweep run` created)",
            file=sys.stderr,
        )
        return 2
    for root in found:
        try:
            done = upgrade(root)
        except UpgradeRefused as exc:
            print(f"throughput-schema: {exc}", file=sys.stderr)
            return 2
        if not done.rewritten and not done.renamed:
            print(f"{root}: already at schema version {SCHEMA_VERSION}; nothing to do")
            continue
        renamed = f", {len(done.renamed)} job outputs renamed" if done.renamed else ""
        print(f"{root}: upgraded to schema version {SCHEMA_VERSION}, {len(done.rewritten)} files rewritten{renamed}")
        for note in done.notes:
            print(f"  {note}")
    return 0


def recipe_from_hf(config: Path, *, name: str | None, output: Path | None) -> int:
    try:
        imported = import_config(config, name=name)
        recipe = recipe_from_dict(imported.raw, source=str(config))
    except (HfConfigError, RecipeError) as exc:
        print(f"throughput-schema: {exc}", file=sys.stderr)
        return 2
    if imported.renamed_from is not None:
        print(
            f"throughput-schema: model name {imported.name!r} (its folder {imported.renamed_from!r} has characters "
            "a model name cannot hold); choose another with --name",
            file=sys.stderr,
        )
    text = recipe_yaml(imported, source=str(config), parameters=parameter_count(recipe.model))
    if output is None:
        sys.stdout.write(text)
        return 0
    if output.is_dir():
        print(f"throughput-schema: --output {output} is a folder; give a file name", file=sys.stderr)
        return 2
    write_atomic(output, text)
    print(f"wrote {output}: {recipe.name}, {parameter_count(recipe.model):,} parameters", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
