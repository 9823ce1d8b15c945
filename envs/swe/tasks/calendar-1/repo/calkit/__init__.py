from calkit.years import days_in_month, is_leap_year
