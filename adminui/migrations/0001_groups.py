"""Create the groups "Prompt engineers" and "Ops" with their model permissions."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

# Shared with tests; a later change to GROUP_PERMISSIONS needs a new migration that calls it again.
from adminui.groups import groups_sync


def forwards(apps, schema_editor):
    # Permissions are normally created after all migrations (post_migrate); create them now
    # for the apps whose permissions the groups hold, so a fresh `migrate` has the groups.
    for label in ("registry", "sessions_app"):
        app_config = apps.get_app_config(label)
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    groups_sync(apps=apps)


def backwards(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=["Prompt engineers", "Ops"]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("registry", "0003_ordering_without_join"),
        ("sessions_app", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
