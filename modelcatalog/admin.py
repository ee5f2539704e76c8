"""Nothing of the model catalog is registered with Django's admin: its tables (ops' overrides,
the retirement notices sent) are records every change of which goes through
modelcatalog.services, and the pages people work with, the catalog with its edit form and the
retiring dashboard, are adminui's (adminui/views/models.py, reached from "Models" in the top
row). A stock change list of them would be one more entry in the top row for the same facts."""
