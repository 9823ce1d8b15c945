from bizdays.calc import add_business_days
