"""Pack file paths written before paths were normalised to NFC: rename each one that is not NFC
to its NFC spelling (and the session reads that name it), so that lookups, which now normalise,
find it. A path whose NFC spelling is already taken in its pack (two files that look the same)
is left as it is, for a person to resolve: neither file is lost.

Data only, and safe while the previous release serves: that code looks paths up exactly as
given, so for the moments between this migration and the new code, only a client that sends
the old, non-NFC spelling misses the file."""

import unicodedata

from django.db import migrations


def to_nfc(apps, schema_editor):
    Pack = apps.get_model("knowledge", "Pack")
    PackFile = apps.get_model("knowledge", "PackFile")
    FileRead = apps.get_model("knowledge", "FileRead")
    renamed: set[int] = set()
    # Only paths with a non-ASCII character can be outside NFC.
    for file in PackFile.objects.filter(path__regex=r"[^\x01-\x7f]").only("id", "pack_id", "path", "domain"):
        nfc = unicodedata.normalize("NFC", file.path)
        if nfc == file.path or PackFile.objects.filter(pack_id=file.pack_id, path=nfc).exists():
            continue
        old = file.path
        head, sep, _ = nfc.partition("/")
        PackFile.objects.filter(pk=file.pk).update(path=nfc, domain=head if sep else "")
        reads = FileRead.objects.filter(pack_id=file.pack_id, path=old)
        # A session that read both spellings keeps the read of the NFC one.
        both = FileRead.objects.filter(pack_id=file.pack_id, path=nfc).values("session_id")
        reads.filter(session_id__in=both).delete()
        reads.update(path=nfc)
        renamed.add(file.pack_id)
    # A renamed domain changes what a prefix shows: a state no cached prefix was built under
    # (the next write to the pack computes the real one).
    Pack.objects.filter(pk__in=renamed).update(prefix_state="")


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0001_initial")]

    operations = [migrations.RunPython(to_nfc, migrations.RunPython.noop, elidable=True)]
