from django.urls import path, re_path

from api import (
    knowledge,
    release_views,
    routes,
    shell,
    transfer_views,
    views,
    views_composition,
    views_skills,
    webhook_views,
)

urlpatterns = [
    path("bundles/", views.BundleListApi.as_view()),
    path("bundles/<str:name>/", views.BundleDetailApi.as_view()),
    path("bundles/<str:name>/versions/", views.VersionListApi.as_view()),
    path("bundles/<str:name>/versions/<int:number>/", views.VersionDetailApi.as_view()),
    path("bundles/<str:name>/dependents/", views_composition.BundleDependentsApi.as_view()),
    path("bundles/<str:name>/export/", transfer_views.BundleExportApi.as_view()),
    path("bundles/<str:name>/import/", transfer_views.BundleImportApi.as_view()),
    path("bundles/<str:name>/versions/<int:number>/canonical/", transfer_views.VersionCanonicalApi.as_view()),
    path("bundles/<str:name>/versions/<int:number>/metrics/", views_skills.VersionMetricsApi.as_view()),
    path("bundles/<str:name>/versions/<int:number>/diff/", views.VersionDiffApi.as_view()),
    path("bundles/<str:name>/versions/<int:number>/revoke/", views.VersionRevokeApi.as_view()),
    path("bundles/<str:name>/versions/<int:number>/usage/", views.VersionUsageApi.as_view()),
    path("bundles/<str:name>/versions/<int:number>/checks/", views.VersionCheckListApi.as_view()),
    path("bundles/<str:name>/versions/<int:number>/approvals/", views.VersionApprovalListApi.as_view()),
    path("bundles/<str:name>/labels/", views.LabelListApi.as_view()),
    path("bundles/<str:name>/labels/<str:label>/", views.LabelDetailApi.as_view()),
    path("bundles/<str:name>/labels/<str:label>/history/", views.LabelHistoryApi.as_view()),
    path("bundles/<str:name>/labels/<str:label>/rollback/", views.LabelRollbackApi.as_view()),
    path("catalog/", views.CatalogApi.as_view()),
    path("shell/SKILL.md", shell.ShellSkillApi.as_view()),
    path("audit/", views.AuditApi.as_view()),
    # The per-turn calls (start, fetch, heartbeat, end, render): one table, both lanes.
    *routes.urlpatterns(),
    path("sessions/<uuid:session_id>/", views.SessionDetailApi.as_view()),
    path("sessions/<uuid:session_id>/compact/", views_skills.SessionCompactApi.as_view()),
    path("sessions/<uuid:session_id>/route/", views_skills.SessionRouteApi.as_view()),
    path("sessions/<uuid:session_id>/turns/", views_skills.SessionTurnsApi.as_view()),
    path("sessions/<uuid:session_id>/skills/", views_skills.SessionSkillListApi.as_view()),
    path("sessions/<uuid:session_id>/skills/<str:name>/", views_skills.SessionSkillDetailApi.as_view()),
    path("releases/", release_views.ReleaseListApi.as_view()),
    path("releases/<uuid:release_id>/", release_views.ReleaseDetailApi.as_view()),
    path("releases/<uuid:release_id>/rollback/", release_views.ReleaseRollbackApi.as_view()),
    path("webhooks/", webhook_views.WebhookListApi.as_view()),
    path("webhooks/<int:webhook_id>/", webhook_views.WebhookDetailApi.as_view()),
    path("webhooks/<int:webhook_id>/rotate-secret/", webhook_views.WebhookRotateSecretApi.as_view()),
    path("webhooks/<int:webhook_id>/deliveries/", webhook_views.WebhookDeliveryListApi.as_view()),
    path(
        "webhooks/<int:webhook_id>/deliveries/<int:delivery_id>/redeliver/", webhook_views.WebhookRedeliverApi.as_view()
    ),
    # Knowledge packs and the model's file tools (docs/rendering.md); the render is in api/routes.py.
    re_path(
        r"^sessions/(?P<session_id>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/knowledge/(?P<tool>ls|glob|grep|read)$",
        knowledge.SessionKnowledgeToolApi.as_view(),
    ),
    path("knowledge/", knowledge.PackListApi.as_view()),
    path("knowledge/<str:pack>/", knowledge.PackDetailApi.as_view()),
    path("knowledge/<str:pack>/files/", knowledge.ManifestApi.as_view()),
    path("knowledge/<str:pack>/files/<path:path>", knowledge.FileApi.as_view()),
]
