from django.contrib import admin

from access.models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "role", "prefix", "created_at", "revoked_at"]
    readonly_fields = ["prefix", "secret_hash", "created_at"]
    list_filter = ["role"]

    def has_add_permission(self, request):
        # Secrets are shown once; create keys with `manage.py create_api_key`.
        return False
