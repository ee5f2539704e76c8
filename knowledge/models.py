"""Knowledge packs: named, live sets of text files that the team edits independently of bundle
versions, and what each session has read of them (for change notices)."""

from django.db import models

from sessions_app.models import Session

MAX_PATH_BYTES = 512
MAX_FILE_BYTES = 1024 * 1024


class Pack(models.Model):
    """A named set of files. Its top-level folders that hold a file are its domains."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    # SHA-256 of what a rendered prefix shows of this pack: its set of domains and each DUTY.md.
    # Rewritten in the transaction of every file change (under this row's lock), so a render can
    # key its prefix cache on it with one small query instead of reading the files.
    prefix_state = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class PackFile(models.Model):
    """One text file of a pack at a relative, normalised `path` (see knowledge.paths)."""

    pack = models.ForeignKey(Pack, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=MAX_PATH_BYTES)
    # The first path segment when the file is inside a folder ('' at the pack's top level):
    # the domains of a pack are its distinct non-empty values.
    domain = models.CharField(max_length=MAX_PATH_BYTES, blank=True, default="")
    content = models.TextField()
    size = models.PositiveIntegerField()  # bytes of UTF-8
    sha256 = models.CharField(max_length=64)
    updated_at = models.DateTimeField()
    updated_by = models.CharField(max_length=200)

    class Meta:
        ordering = ["pack_id", "path"]
        constraints = [models.UniqueConstraint(fields=["pack", "path"], name="packfile_path_unique")]
        indexes = [models.Index(fields=["pack", "domain"], name="packfile_domain_idx")]

    def __str__(self) -> str:
        return f"{self.pack_id}:{self.path}"


class FileRead(models.Model):
    """What one session knows of one file: the SHA-256 it read, or the state the latest change
    notice told it about ('' = deleted). A render compares it with the file as it is now."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    pack = models.ForeignKey(Pack, on_delete=models.CASCADE, related_name="+")
    path = models.CharField(max_length=MAX_PATH_BYTES)
    known_sha256 = models.CharField(max_length=64, blank=True, default="")
    read_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "pack", "path"], name="fileread_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.pack_id}:{self.path}"
