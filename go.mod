module github.com/leasehq/lease

go 1.26.8
