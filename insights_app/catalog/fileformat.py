"""Reading and writing the catalog file's YAML, and the errors that name where a file is wrong.

The reader is `yaml.SafeLoader` (no Python objects) with three guards a hostile file needs:
anchors and aliases are refused (safe_load expands every alias, so a "billion laughs" file of a
few hundred bytes becomes gigabytes of lists), nesting is capped (the composer recurses), and a
key written twice in one mapping is an error instead of the last one silently winning. With no
aliases the number of nodes is bounded by the file's size, which the caller caps
(MAX_FILE_BYTES) before parsing.
"""
import yaml

MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 32


class CatalogError(Exception):
    """A file that cannot be imported; `lines` say where each problem is."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def _where(mark) -> str:
    return f"第 {mark.line + 1} 行第 {mark.column + 1} 列" if mark is not None else "?"


class _GuardedLoader(yaml.SafeLoader):
    depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "不支持 YAML 锚点和别名（&、*）：请把内容直接写出", event.start_mark
            )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"嵌套超过 {MAX_DEPTH} 层", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # an unhashable key: the base class says so
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"键 {key!r} 在同一个映射里出现了两次", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def catalog_yaml_load(text: str):
    """The document's data, or CatalogError for a file too large or not safe, well-formed YAML."""
    if len(text.encode("utf-8")) > MAX_FILE_BYTES:
        raise CatalogError([f"文件超过 {MAX_FILE_BYTES // 1024} KB 的上限"])
    try:
        return yaml.load(text, Loader=_GuardedLoader)  # a SafeLoader subclass: no Python objects
    except yaml.MarkedYAMLError as exc:
        raise CatalogError([f"YAML 错误（{_where(exc.problem_mark)}）：{exc.problem}"]) from exc
    except yaml.YAMLError as exc:
        raise CatalogError([f"YAML 错误：{exc}"]) from exc


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True  # the reader refuses aliases: never write one


def _str_representer(dumper: yaml.SafeDumper, value: str):
    # Prompts and descriptions as `|` blocks: readable and diff-friendly.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def catalog_yaml_dump(data) -> str:
    return yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=1000, indent=2)
