"""`manage.py knowledge_import PATH… --collection SLUG [--name …] [--description …]`: files (or the
files of folders, not descending) added to a collection, made when missing, and indexed; a file
whose content is already there is skipped (docs/knowledge.md#adding-documents)."""

from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from knowledge_app.indexing import documents_index_waiting
from knowledge_app.ingest import DocumentRefused, document_add
from knowledge_app.models import KnowledgeCollection


class Command(BaseCommand):
    help = "把文件导入知识库（没有这个知识库就新建）。"

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", type=Path, help="files, or folders whose files are imported")
        parser.add_argument("--collection", required=True, help="the collection's slug")
        parser.add_argument("--name", help="the collection's name, when it is made (default: the slug)")
        parser.add_argument("--description", help="what the model reads to decide to search it, when it is made")

    def handle(self, *args, paths: list[Path], collection: str, name: str | None, description: str | None, **options):
        target = KnowledgeCollection.objects.filter(slug=collection).first()
        if target is None:
            target = KnowledgeCollection(slug=collection, name=name or collection,
                                         description=description or name or collection)
            try:
                target.full_clean()
            except ValidationError as exc:
                raise CommandError(f"--collection {collection!r}: {'; '.join(exc.messages)}") from exc
            target.save()
            self.stdout.write(f"collection {collection} made")
        files = [file for path in paths for file in (sorted(p for p in path.iterdir() if p.is_file())
                                                     if path.is_dir() else [path])]
        added = skipped = refused = 0
        for file in files:
            try:
                data = file.read_bytes()
            except OSError as exc:
                raise CommandError(f"{file}: {exc}") from exc
            try:
                result = document_add(collection=target, name=file.name, data=data)
            except DocumentRefused as exc:
                refused += 1
                self.stderr.write(f"{file}: refused: {exc}")
                continue
            if result.created:
                added += 1
                self.stdout.write(f"{file}: added as 《{result.document.title}》")
            else:
                skipped += 1
                self.stdout.write(f"{file}: already there as 《{result.document.title}》")
        self.stdout.write(f"{added} added, {skipped} already there, {refused} refused")
        if added:  # indexed here, before the command ends (knowledge_app.indexing)
            documents_index_waiting()
            for document in target.documents.order_by("title"):
                state = (f"{document.passage_count} passages" if document.status == document.Status.READY
                         else f"{document.get_status_display()} {document.error}".strip())
                self.stdout.write(f"《{document.title}》: {state}")
        if refused and not added and not skipped:
            raise CommandError("nothing imported")
