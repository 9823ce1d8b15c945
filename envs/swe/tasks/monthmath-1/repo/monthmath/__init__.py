from monthmath.months import add_months
